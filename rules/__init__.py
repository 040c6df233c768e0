"""zym.rules."""
