"""The stdio transport as JSON-RPC 2.0 has it answer: a line that is no JSON gets a -32700
reply, and a request that is no valid request (``"params": "x"``) a -32600 reply with its id.

The SDK's stdio reader hands such a line to the session as an exception, which logs it and
answers nothing: a client waiting on that id hangs. Here, between the transport and the
session, each one becomes the error reply the client waits for; every valid message passes
through untouched.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

PARSE_ERROR, INVALID_REQUEST = -32700, -32600


def error_reply(problem: Exception) -> types.JSONRPCError | None:
    """The reply to a line the transport could not read as a message, or None (a response
    or notification of ours gone wrong has no one waiting)."""
    if not isinstance(problem, ValidationError):
        return None
    errors = problem.errors(include_url=False)
    if any(error["type"] == "json_invalid" for error in errors):
        return _reply(None, PARSE_ERROR, "Parse error: the line is not JSON")
    line = next((e.get("input") for e in errors if isinstance(e.get("input"), dict)), None)
    request_id = line.get("id") if isinstance(line, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    if isinstance(line, dict) and "method" in line and request_id is None:
        return None  # a bad notification: JSON-RPC answers none
    fields = [".".join(str(part) for part in e["loc"][1:]) for e in errors if len(e["loc"]) > 1]
    where = ", ".join(dict.fromkeys(fields))  # each field once, in order
    detail = f" ({where[:200]})" if where else ""
    return _reply(
        request_id, INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 message{detail}"
    )


def _reply(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


async def serve_stdio(server: Any) -> None:
    """Run ``server`` (an MCPServer) over stdio, answering unreadable lines."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            async with send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        reply = error_reply(item)
                        if reply is not None:
                            await write_stream.send(SessionMessage(reply))
                        continue
                    await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(forward)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


__all__ = ["error_reply", "serve_stdio"]
