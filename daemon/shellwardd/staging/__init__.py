"""Staged execution: a call writes into its own overlay; the daemon commits what it wrote."""
