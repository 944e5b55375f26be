"""`wp-mcp serve`: run the MCP server over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
from typing import Any

from wp_mcp.graph.safetext import MAX_PATH_EXCERPT, excerpt

from .errors import UserError

log = logging.getLogger(__name__)

TOKEN_ENV = "WP_MCP_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:
    from .mcp_state import DEFAULT_MAX_FILE_MB

    p = sub.add_parser(
        "serve",
        help="serve the graph, views and skills to assistants over MCP",
        description=(
            "Run the wp-mcp MCP server. stdio is for assistants that spawn it (Claude Code, "
            "Claude Desktop, IDEs); http serves streamable HTTP on loopback, or on another "
            f"address only with a bearer token (--token or ${TOKEN_ENV})."
        ),
    )
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="http bind address (default loopback)")
    p.add_argument("--port", type=int, default=8765, help="http port (default 8765)")
    p.add_argument("--token", help=f"bearer token clients must send (http; or ${TOKEN_ENV})")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="http: another Host name clients use to reach the server (DNS-rebinding check)",
    )
    p.add_argument(
        "--allow-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also allow wp_open below DIR (the cwd and the store are always allowed)",
    )
    p.add_argument(
        "--max-file-mb",
        type=float,
        default=DEFAULT_MAX_FILE_MB,
        metavar="N",
        help=f"largest file wp_open imports (default {DEFAULT_MAX_FILE_MB} MiB)",
    )
    p.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    from .mcp_server import build_server
    from .mcp_state import ServerState

    if args.max_file_mb <= 0:
        raise UserError("--max-file-mb must be positive")
    for folder in args.allow_dir:
        if not os.path.isdir(folder):
            raise UserError(f"--allow-dir {excerpt(folder, MAX_PATH_EXCERPT)} is not a directory")
    state = ServerState(
        store_path=args.store, allow_dirs=tuple(args.allow_dir), max_file_mb=args.max_file_mb
    )
    server = build_server(state)
    if args.transport == "stdio":
        server.run("stdio")
        return 0
    token = args.token or os.environ.get(TOKEN_ENV)
    _serve_http(server, args.host, args.port, token, args.allow_host)
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve_http(
    server: Any, host: str, port: int, token: str | None, extra_hosts: list[str]
) -> None:
    """Streamable HTTP with Host/Origin checks; a bearer token is required off loopback."""
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    if not _is_loopback(host) and not token:
        raise UserError(
            f"--host {host} is not loopback: set a bearer token with --token or ${TOKEN_ENV}"
        )
    names = _host_names(host, extra_hosts)
    addresses = sorted({f"{name}:{port}" for name in names} | names)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=addresses,
        allowed_origins=[f"http://{address}" for address in addresses],
    )
    app = server.streamable_http_app(transport_security=security, host=host)
    if token:
        app = BearerAuth(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)


def _host_names(host: str, extra_hosts: list[str]) -> set[str]:
    """Host header values a legitimate client sends: the bind address, loopback names, this
    machine's names when bound to every interface, and what --allow-host adds."""
    import socket

    names = {"127.0.0.1", "localhost", "[::1]", *extra_hosts}
    if host in ("0.0.0.0", "::"):
        names |= {socket.gethostname(), socket.getfqdn()}
    else:
        names.add(f"[{host}]" if ":" in host else host)
    return names


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }  # fmt: skip
                )
                await send(
                    {"type": "http.response.body", "body": b"missing or wrong bearer token\n"}
                )
                return
        await self.app(scope, receive, send)
