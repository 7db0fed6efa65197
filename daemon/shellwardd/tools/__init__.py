"""Business tools from MCP servers: configured, reclassified, keyed and called.

One job per module: ``config`` reads the operator's file, ``classify`` decides what a tool
may do, ``keys`` builds idempotency keys, ``mcp_client`` talks to one server, and
``registry`` ties them into the tool list the runtime serves.
"""
