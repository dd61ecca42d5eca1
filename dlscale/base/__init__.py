"""The house's small tools, below every stage: atomic writes, strict YAML, logging, host utilities."""
