"""A study's config -> checks -> the run matrix (stable run ids) -> the jobs, and the preflight before any job."""
