"""zym.analysis."""
