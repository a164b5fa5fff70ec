"""Map an error log, traceback or symptom to its G-number (issue 5)."""
