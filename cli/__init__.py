"""zym.cli."""
