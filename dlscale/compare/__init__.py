"""Studies against each other: cell by cell, with the changed settings named."""
