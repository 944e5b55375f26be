"""wp-mcp: host topology graphs and deterministic performance diagnosis, served over MCP."""

__version__ = "0.1.0"
