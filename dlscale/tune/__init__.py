"""The tuning stage: the grid of settings per framework, and the choice made from the race."""
