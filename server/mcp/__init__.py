"""The MCP server `wp-mcp serve` runs: ``server.build_server`` assembles it from the tools in
``tools/`` (every module there is loaded; ``@tool`` registers each), the resources, prompts
and completions of ``server.py``, the subscriptions of ``watch.py`` and the picture app of
``app.py``, over one ``state.ServerState``."""
