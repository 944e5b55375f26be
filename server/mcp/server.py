"""The MCP server: thin glue from MCP tools, resources and prompts to the shared functions.

:func:`build_server` assembles it over one ``ServerState``: every tool the modules of
``tools/`` register (``tools/__init__.py`` says what a tool is), the resources, prompts and
completions below, the store's subscriptions (``watch.py``) and the picture app
(``app.py``). Anything a caller can fix comes back as an error result whose text says what
to call instead (``errors.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.shared.exceptions import MCPError
from mcp.types import Completion
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import ValidationError
from wp_mcp.graph.safetext import excerpt
from wp_mcp.skills import SKILL_NAMES as SKILLS  # the registry only: no engine is loaded

from wp_mcp import __version__

from .app import register_picture_app
from .errors import resource_errors, user_errors
from .state import ServerState
from .text import DIAGNOSE_PROMPT, INSTRUCTIONS, SKILL_PROMPT, page_text
from .tools import DEFAULT_MAX_TOKENS, load_tools
from .tools.skills import report_text, skill_doc
from .tools.snapshots import snapshot_listing
from .watch import register_monitoring


class WpServer(MCPServer):
    """MCPServer that rejects unknown tool arguments instead of silently ignoring them.

    A model that misspells ``max_tokens`` should learn it, not get a default-sized answer.
    """

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:  # the protocol's answer to a tool that does not exist: -32602
            known = ", ".join(t.name for t in self._tool_manager.list_tools())
            raise MCPError(INVALID_PARAMS, f"unknown tool {excerpt(name, 40)}; tools: {known}")
        valid = sorted(tool.parameters.get("properties", {}))
        unknown = sorted(set(arguments) - set(valid))
        if unknown:
            shown = ", ".join(excerpt(arg, 40) for arg in unknown[:10])
            raise ToolError(
                f"{name}: unknown argument(s) {shown}; valid arguments: "
                f"{', '.join(valid) or '(none)'}"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_argument_error(name, exc.__cause__)) from None
            raise

    async def get_prompt(self, name: str, arguments: Any = None, context: Any = None) -> Any:
        if not self._prompt_manager.get_prompt(name):
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(INVALID_PARAMS, f"unknown prompt {excerpt(name, 40)}; prompts: {known}")
        return await super().get_prompt(name, arguments, context)


def _argument_error(tool: str, exc: ValidationError) -> str:
    """Pydantic's report as one line per argument: which, what was wrong, what was given."""
    parts = []
    for error in exc.errors()[:4]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        value = error.get("input")
        given = f"{type(value).__name__} {excerpt(str(value), 30)}"
        parts.append(f"{where}: {error.get('msg', 'invalid').lower()} (got {given})")
    return f"{tool}: bad argument {'; '.join(parts)}; tools/list gives each argument's schema"


def build_server(state: ServerState | None = None) -> WpServer:
    """The wp-mcp MCP server over ``state`` (a fresh default state when None)."""
    state = state or ServerState()
    server = WpServer(
        name="wp-mcp",
        title="wp-mcp: host topology diagnosis",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    _register_tools(server, state)
    _register_resources(server, state)
    _register_prompts(server)
    _register_completions(server, state)
    register_monitoring(server, state)  # subscriptions, wp://snapshots/latest, wp://findings
    register_picture_app(server, state)  # the ui:// page
    return server


def _register_tools(server: WpServer, state: ServerState) -> None:
    for spec in load_tools():
        server.add_tool(
            user_errors(_bound(spec.handler, state)),
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=spec.annotations,
            meta=spec.meta,
        )


def _bound(handler: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """``handler`` with ``state`` given, its signature (what MCPServer reads) without it."""
    signature = inspect.signature(handler, eval_str=True)
    arguments = list(signature.parameters.values())[1:]
    if inspect.iscoroutinefunction(handler):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await handler(state, *args, **kwargs)

        bound: Any = call_async
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            return handler(state, *args, **kwargs)

        bound = call
    bound.__name__ = bound.__qualname__ = handler.__name__
    bound.__doc__ = handler.__doc__
    bound.__signature__ = signature.replace(parameters=arguments)
    bound.__annotations__ = {p.name: p.annotation for p in arguments}
    bound.__annotations__["return"] = signature.return_annotation
    return bound


# --------------------------------------------------------------------------- resources


def _register_resources(server: WpServer, state: ServerState) -> None:
    @server.resource("wp://snapshots", name="snapshots", mime_type="text/plain",
                     description="Stored snapshots (as wp_snapshots)")  # fmt: skip
    @resource_errors
    def snapshots() -> str:
        return snapshot_listing(state, 50)[0]

    @server.resource("wp://snapshots/{id}/summary", name="snapshot-summary", mime_type="text/plain",
                     description="Summary of a snapshot (as wp_summary)")  # fmt: skip
    @resource_errors
    def summary(id: str) -> str:
        return state.render(id, "summary")[0].text

    @server.resource("wp://snapshots/{id}/layers/{layer}", name="snapshot-layer",
                     mime_type="text/plain",
                     description="First page of a layer or view (as wp_layer)")  # fmt: skip
    @resource_errors
    def layer(id: str, layer: str) -> str:
        return state.render(id, layer, max_tokens=DEFAULT_MAX_TOKENS)[0].text

    @server.resource("wp://reports/{id}", name="report", mime_type="text/markdown",
                     description="First page of a stored report (as wp_report)")  # fmt: skip
    @resource_errors
    def report(id: str) -> str:
        report_id = state.store.get_report(id).id
        text = report_text(state, report_id, None, None, "md")
        return page_text(text, max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=f"wp_report report={report_id}").text  # fmt: skip

    @server.resource("skill://{name}/SKILL.md", name="skill", mime_type="text/markdown",
                     description="A skill's SKILL.md (as wp_skill_docs)")  # fmt: skip
    @resource_errors
    def skill_md(name: str) -> str:
        again = f"wp_skill_docs skill={name}"
        return page_text(skill_doc(name, None), max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=again).text  # fmt: skip

    @server.resource("skill://{name}/references/{reference}", name="skill-reference",
                     mime_type="text/markdown",
                     description="A skill's reference file")  # fmt: skip
    @resource_errors
    def skill_reference(name: str, reference: str) -> str:
        again = f"wp_skill_docs skill={name} reference={reference}"
        return page_text(skill_doc(name, reference), max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again=again).text  # fmt: skip


# --------------------------------------------------------------------------- prompts


def _register_prompts(server: WpServer) -> None:
    def diagnose(snapshot: str = "latest") -> str:
        return DIAGNOSE_PROMPT.format(snapshot=snapshot)

    server.add_prompt(
        Prompt.from_function(
            diagnose,
            name="diagnose",
            title="Diagnose a host (four steps)",
            description="Collect or load, look layer by layer, run the skills, report by priority.",
        )
    )
    for skill in SKILLS:
        server.add_prompt(
            Prompt.from_function(
                _skill_prompt(skill),
                name=skill,
                title=f"Run {skill}",
                description=f"Run the {skill} skill on a snapshot and explain its findings.",
            )
        )


def _skill_prompt(skill: str) -> Callable[..., str]:
    def prompt(snapshot: str = "latest") -> str:
        return SKILL_PROMPT.format(skill=skill, snapshot=snapshot)

    return prompt


# --------------------------------------------------------------------------- completions


def _register_completions(server: WpServer, state: ServerState) -> None:
    """Argument completion for resource templates and prompts (ids, layers, skills)."""

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion:
        known = dict(getattr(context, "arguments", None) or {})
        target: str = getattr(ref, "uri", "") or getattr(ref, "name", "")
        values = await anyio.to_thread.run_sync(
            _completions, state, target, argument.name, argument.value or "", known
        )
        return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)


def _completions(
    state: ServerState, target: str, name: str, prefix: str, known: dict[str, str]
) -> list[str]:
    if name == "id" and target.startswith("wp://reports/"):
        values = ["latest", *(r.id for r in state.store.list_reports())]
    elif name in ("id", "snapshot"):
        values = ["latest", *(s.id for s in state.store.list(limit=100))]
    elif name == "layer":
        from wp_mcp.converters import VIEWS

        values = [view for view in VIEWS if view not in ("summary", "entity")]
    elif name == "name":
        values = list(SKILLS)
    elif name == "reference" and known.get("name") in SKILLS:
        from wp_mcp.skills import bundle_dir

        folder = bundle_dir(known["name"]) / "references"
        values = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    else:
        values = []
    return [value for value in values if value.startswith(prefix)]
