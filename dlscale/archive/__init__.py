"""A study's archive: made, verified, and read as hostile input."""
