"""The leaf of drover: statuses, value types, the apply plan, errors, clock, options, ids.

Nothing here imports any other part of drover; the coordinator and storage
both build on it and never on each other.
"""
