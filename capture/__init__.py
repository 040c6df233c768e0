"""zym.capture."""
