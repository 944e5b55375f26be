"""The interfaces: the `wp-mcp` command line, the MCP server and the monitor.

- ``cli/``: the `wp-mcp` entry (the parser, :func:`~wp_mcp.server.cli.main`) and one module
  per group of commands;
- ``mcp/``: `wp-mcp serve`'s MCP server (``server.py``), its tools (``tools/``, one module
  per topic, found by the server), what a serving process holds (``state.py``), store
  watching and subscriptions (``watch.py``) and the picture app (``app.py``);
- ``monitoring/``: `wp-mcp monitor`'s cycle (``monitor.py``) and where its events go
  (``outputs.py``: stdout, a file, webhooks, Prometheus);
- shared by all three: the config file's model (``config.py``) and where the file is
  (``config_file.py``, cheap to import), and the user's errors (``errors.py``).
"""
