"""`python -m wp_mcp.server.cli` is the same as the `wp-mcp` command."""

from wp_mcp.server.cli import main

raise SystemExit(main())
