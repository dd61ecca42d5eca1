"""The machine a run lands on: placement, network and user namespaces, contention, the roofline, the site check."""
