"""Built-in policy rule files (TOML), shipped with the daemon."""
