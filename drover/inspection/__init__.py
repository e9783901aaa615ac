"""Inspection: history search, the "why" diagnosis, and statistics."""
