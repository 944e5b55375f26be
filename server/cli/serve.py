"""`wp-mcp serve`: run the MCP server over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
import socket
import sys
from typing import Any

from wp_mcp.graph.safetext import MAX_PATH_EXCERPT, error_line, excerpt

from ..errors import UserError
from .commands import command_help

log = logging.getLogger(__name__)

TOKEN_ENV = "WP_MCP_TOKEN"
# A session costs ~27 KB until it is closed or expires; a client that never closes its
# sessions must not grow the server without bound (the SDK's defaults are 10,000 and 30 min).
DEFAULT_MAX_SESSIONS = 100
DEFAULT_SESSION_IDLE_S = 600.0


def register(sub: argparse._SubParsersAction) -> None:
    from ..mcp.state import DEFAULT_MAX_FILE_MB

    p = sub.add_parser(
        "serve",
        help=command_help("serve"),
        description=(
            "Run the wp-mcp MCP server. stdio is for assistants that spawn it (Claude Code, "
            "Claude Desktop, IDEs); http serves streamable HTTP behind a bearer token "
            f"(--token-file, ${TOKEN_ENV} or --token; on loopback without one, the server's "
            "own, kept in the store's folder)."
        ),
    )
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    # host, port, token file and allowed folders may come from the config file (serve.*)
    p.add_argument("--host", help="http bind address (default loopback)")
    p.add_argument("--port", type=int, help="http port (default 8765)")
    token = p.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"http: read the bearer token clients must send from FILE's first line (or ${TOKEN_ENV})",
    )
    token.add_argument(
        "--token", help="http: the bearer token itself (visible in `ps`: prefer --token-file)"
    )
    p.add_argument(
        "--allow-local-users",
        action="store_true",
        help="http on loopback: no token; every local user may then use the server (and its rights)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"http: most sessions open at once; a new one closes the least recently used (default {DEFAULT_MAX_SESSIONS})",
    )
    p.add_argument(
        "--session-idle-s",
        type=float,
        default=DEFAULT_SESSION_IDLE_S,
        metavar="S",
        help=f"http: close a session after S seconds without a request (default {DEFAULT_SESSION_IDLE_S:g})",
    )
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
    from ..mcp.server import build_server
    from ..mcp.state import ServerState

    apply_config(args)
    if args.max_file_mb <= 0:
        raise UserError("--max-file-mb must be positive")
    if args.max_sessions < 1 or not 0 < args.session_idle_s < float("inf"):
        raise UserError("--max-sessions and --session-idle-s must be positive")
    for folder in args.allow_dir:
        if not os.path.isdir(folder):
            raise UserError(f"--allow-dir {excerpt(folder, MAX_PATH_EXCERPT)} is not a directory")
    state = ServerState(
        store_path=args.store, allow_dirs=tuple(args.allow_dir), max_file_mb=args.max_file_mb,
        allow_cwd=args.transport == "stdio",  # a daemon's cwd is not its HTTP clients' folder
    )  # fmt: skip
    server = build_server(state)
    if args.transport == "stdio":
        import anyio

        from ..mcp.stdio import serve_stdio  # the SDK's transport, answering unreadable lines

        anyio.run(serve_stdio, server)
        return 0
    sessions = {"max_sessions": args.max_sessions, "session_idle_timeout": args.session_idle_s}
    token = read_token(args)
    if token is None and args.allow_local_users and not _is_loopback(args.host):
        raise UserError("--allow-local-users is for loopback; off loopback set a token")
    _serve_http(server, state, args.host, args.port, token, args.allow_host, sessions,
                local_users=args.allow_local_users)  # fmt: skip
    return 0


def apply_config(args: argparse.Namespace) -> None:
    """The config file's serve.* and store.path where no flag set them (docs/monitoring.md:
    flags > environment > file > defaults); its allowed folders are added to --allow-dir."""
    from ..config import from_args

    loaded = from_args(args)
    serve = loaded.config.serve
    args.store, args.host, args.port = loaded.config.store.path, serve.host, serve.port
    args.allow_dir = [*serve.allow_dirs, *args.allow_dir]
    if not (args.token_file or args.token or os.environ.get(TOKEN_ENV)):
        args.token_file = serve.token_file  # a token given any other way beats the file's


def read_token(args: argparse.Namespace) -> str | None:
    """The bearer token from --token, --token-file or the environment (None: no token)."""
    if args.token_file is None:
        return args.token or os.environ.get(TOKEN_ENV) or None
    shown = excerpt(args.token_file, MAX_PATH_EXCERPT)
    try:
        with open(args.token_file, encoding="utf-8") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            token = handle.readline(4096).strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UserError(f"--token-file {shown}: cannot read: {reason}") from None
    if not token:
        raise UserError(f"--token-file {shown}: the first line is empty; put the token there")
    if mode & 0o077:
        log.warning("--token-file %s is readable by other users: chmod 600 it", shown)
    return token


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve_http(
    server: Any,
    state: Any,
    host: str,
    port: int,
    token: str | None,
    extra_hosts: list[str],
    sessions: dict[str, Any],
    local_users: bool = False,
) -> None:
    """Streamable HTTP with Host/Origin checks behind a bearer token: the one given, else on
    loopback the server's own (``http_access.local_token``), unless ``local_users``."""
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings
    from wp_mcp.server.mcp.http_access import SessionLimit, local_token

    if not _is_loopback(host) and not token:
        raise UserError(
            f"--host {excerpt(host)} is not loopback: set a bearer token with --token-file or "
            f"${TOKEN_ENV}"
        )
    token_file = None
    if not token and not local_users:
        token, token_file = local_token(state.store.path)
    listener = bind_listener(host, port)
    # the bound port, not the asked one: --port 0 picks a free port a script must learn, and
    # the Host check must know it (built from port 0 it refused every request with 421)
    bound_port = listener.getsockname()[1]
    names = _host_names(host, extra_hosts)
    addresses = sorted({f"{name}:{bound_port}" for name in names} | names)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=addresses,
        allowed_origins=[f"http://{address}" for address in addresses],
    )
    add_picture_route(server, state, set(addresses))
    add_health_route(server)
    # the SDK's own limit only backs ours up: SessionLimit closes the oldest session first
    limits = {**sessions, "max_sessions": 2 * sessions["max_sessions"] + 1}
    app = server.streamable_http_app(transport_security=security, host=host, **limits)
    app = SessionLimit(app, sessions["max_sessions"])
    if token:
        app = BearerAuth(app, token)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"listening on http://{shown_host}:{bound_port}/mcp", file=sys.stderr, flush=True)
    if token_file is not None:
        print(f"bearer token: the first line of {token_file} (Authorization: Bearer …)",
              file=sys.stderr, flush=True)  # fmt: skip
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [listener])


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening here so a busy port is one clear line and
    the printed address is one clients reach."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        # Listening before the address is printed: a client that reads the line and
        # connects at once is queued until the server accepts, not refused (uvicorn's own
        # listen() comes only after its start-up).
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        reason = exc.strerror or "cannot bind"
        raise UserError(f"cannot listen on {excerpt(host)}:{port}: {reason}") from None
    return listener


HEALTH_PATH = "/healthz"


def add_health_route(server: Any) -> None:
    """GET /healthz: 200 and the server's name and version, for load balancers and
    supervisors. It carries no host data, so it needs no token (BearerAuth lets it by)."""
    from starlette.responses import JSONResponse

    from wp_mcp import __version__

    @server.custom_route(HEALTH_PATH, methods=["GET"])
    async def health(request: Any) -> Any:
        body = {"status": "ok", "server": "wp-mcp", "version": __version__}
        return JSONResponse(body, headers={"Cache-Control": "no-store"})


PICTURE_PATH = "/picture/{snapshot}"


def add_picture_route(server: Any, state: Any, allowed_hosts: set[str]) -> None:
    """GET /picture/ID (an id, prefix or 'latest'): the snapshot's HTML picture, behind the
    same bearer token as MCP (the middleware wraps every route) and the same Host check."""
    import anyio.to_thread
    from starlette.responses import HTMLResponse, PlainTextResponse
    from wp_mcp.converters.html import CSP, render_html

    from ..pictures import picture_of

    def page(ref: str) -> str:
        snapshot_id = state.resolve_snapshot(ref)
        return state.cached(
            ("picture", snapshot_id), lambda: render_html(picture_of(state.graph(snapshot_id)))
        )

    @server.custom_route(PICTURE_PATH, methods=["GET"])
    async def picture(request: Any) -> Any:
        if request.headers.get("host") not in allowed_hosts:  # DNS rebinding
            return PlainTextResponse("unexpected Host header\n", status_code=421)
        try:
            html = await anyio.to_thread.run_sync(page, request.path_params["snapshot"])
        except UserError as exc:
            return PlainTextResponse(error_line(exc) + "\n", status_code=404)
        headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
        return HTMLResponse(html, headers=headers)


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
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``,
    but GET /healthz, which tells nothing about the host.

    The scheme is matched case-insensitively (RFC 7235: ``bearer`` is as good as ``Bearer``);
    the token is compared in constant time, so its prefix cannot be guessed by timing.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not _is_health_probe(scope) and not self._authorized(scope):
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
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, credentials = header.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            credentials.strip(), self._expected
        )


def _is_health_probe(scope: dict) -> bool:
    return scope.get("method") == "GET" and scope.get("path") == HEALTH_PATH
