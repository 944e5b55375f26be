"""`wp-mcp monitor`: the cycle (``monitor.py``) and where its events go (``outputs.py``)."""
