"""Events -> tables -> evals, statistics, convergence -> cells, findings, claims; parity."""
