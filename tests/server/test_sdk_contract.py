"""The MCP SDK internals the server relies on, checked on the installed SDK.

The server reaches past the SDK's public API in a few places (server/mcp/server.py rejects
unknown tool arguments and prompts through ``_tool_manager`` and ``_prompt_manager``;
server/mcp/watch.py publishes store changes on ``_subscriptions`` and wraps the low-level
server's ``subscriptions/listen`` handler, found through ``_lowlevel_server``). An SDK upgrade that renames or reshapes any of
them must fail here, by name, rather than surface as an AttributeError in a user's session.
"""

from __future__ import annotations

import inspect

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.shared.subscriptions import ResourceUpdated
from pydantic import BaseModel

pytestmark = pytest.mark.anyio


def parameter_names(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_call_tool_and_get_prompt_take_the_arguments_the_overrides_pass_on() -> None:
    """WpServer overrides both and calls super() with (name, arguments, context)."""
    for method in (MCPServer.call_tool, MCPServer.get_prompt):
        assert inspect.iscoroutinefunction(method), method.__name__
        assert parameter_names(method) == ["self", "name", "arguments", "context"], method


def test_tool_manager_finds_a_tool_and_its_argument_schema(server) -> None:
    tool = server._tool_manager.get_tool("wp_layer")
    assert tool is not None and tool.name == "wp_layer"
    assert isinstance(tool.parameters, dict)
    assert {"snapshot", "max_tokens"} <= set(tool.parameters["properties"])
    assert server._tool_manager.get_tool("wp_no_such_tool") is None


def test_prompt_manager_finds_registered_prompts_by_name(server) -> None:
    prompts = server._prompt_manager.list_prompts()
    names = [prompt.name for prompt in prompts]
    assert names and all(isinstance(name, str) for name in names)
    assert server._prompt_manager.get_prompt(names[0]) is not None
    assert not server._prompt_manager.get_prompt("no-such-prompt")


async def test_subscription_bus_delivers_a_published_resource_update(server) -> None:
    bus = server._subscriptions
    assert inspect.iscoroutinefunction(bus.publish)
    received: list[object] = []
    unsubscribe = bus.subscribe(received.append)
    try:
        await bus.publish(ResourceUpdated(uri="wp://snapshots/latest"))
    finally:
        unsubscribe()
    assert [str(event.uri) for event in received] == ["wp://snapshots/latest"]


def test_low_level_server_gives_request_handlers_as_params_type_and_handler() -> None:
    """A fresh SDK server serves subscriptions/listen; mcp_watch wraps that handler."""
    lowlevel = MCPServer(name="contract")._lowlevel_server
    assert parameter_names(lowlevel.add_request_handler) == ["method", "params_type", "handler"]
    listen = lowlevel.get_request_handler("subscriptions/listen")
    assert listen is not None, "the SDK no longer serves subscriptions/listen by default"
    assert callable(listen.handler)
    assert issubclass(listen.params_type, BaseModel)
    assert lowlevel.get_request_handler("no/such/method") is None


def test_monitoring_handlers_replace_the_sdk_ones(server) -> None:
    """What add_request_handler stores is what the server dispatches: ours, after building."""
    lowlevel = server._lowlevel_server
    handler = lowlevel.get_request_handler
    assert handler("subscriptions/listen").handler.__name__ == "listen_and_watch"
    assert handler("resources/subscribe").handler.__name__ == "subscribe"
    assert handler("resources/unsubscribe").handler.__name__ == "unsubscribe"
