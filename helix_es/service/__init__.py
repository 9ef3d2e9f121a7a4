"""Serving the memory to other processes: the REST service and the MCP server (`helix-es mcp`)."""
