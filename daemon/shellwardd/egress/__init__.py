"""Network egress: the per-call allow-list, the daemon's proxy, the relay in the sandbox."""
