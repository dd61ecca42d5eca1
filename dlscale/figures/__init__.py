"""What a person reads: the study's figures, drawn from its tables."""
