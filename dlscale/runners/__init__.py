"""Framework runners: one folder per framework, all of the same shape (see contract.py)."""
