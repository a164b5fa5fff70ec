"""Measure device memory bandwidth in the target environment (G5, issue 7)."""
