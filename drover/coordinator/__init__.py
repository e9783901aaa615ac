"""The engine: handler ABCs, result classification, apply planning and ticks."""
