"""One config file (TOML) for the settings a long-running `wp-mcp` needs.

Where it is read from, first found wins: `wp-mcp --config FILE`, `$WP_MCP_CONFIG`,
`$XDG_CONFIG_HOME/wp-mcp/config.toml` (default `~/.config/wp-mcp/config.toml`),
`/etc/wp-mcp/config.toml`. Precedence of each value: command-line flags > environment
variables > the file > the defaults below. The file is validated by pydantic: an unknown
key or a wrong value is named with its key, the file and its line, every bad value of the
file on one line (exit 2). Types are strict (``keep = true`` is no count, ``interval_s =
true`` no interval), numbers finite and every size and list bounded: a config edit can refuse
to start a command, never delete snapshots or take a daemon down.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import describe_os_error, shown
from wp_mcp.graph.safetext import excerpt
from wp_mcp.graph.store import MAX_KEEP, env_keep

from .config_file import find_config

MAX_CONFIG_BYTES = 1 << 20
MAX_PATTERN_CHARS = 500
MAX_LIST = 64  # items of a list setting (folders, collectors, patterns, tiers)
MAX_WEBHOOKS = 32
MAX_TEXT_CHARS = 4096  # a path, a URL, an address
MAX_ERRORS_SHOWN = 5
# The leaves of every section: TOML tells booleans, integers and floats apart, and so do these
# (pydantic's lax mode would make `true` a 1 and "inf" a float)
Count = Annotated[int, Field(strict=True)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]
Text = Annotated[str, Field(strict=True, max_length=MAX_TEXT_CHARS)]
_BIND = re.compile(r"(?P<host>[0-9.]+|\[[0-9a-fA-F:]+\]|localhost):(?P<port>\d{1,5})\Z")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class StoreConfig(_Section):
    path: Text | None = Field(None, description="snapshot store directory")
    keep: Count = Field(
        400, ge=0, le=MAX_KEEP, description="snapshots kept at most (0: no count limit)"
    )
    # (max age s, spacing s): all of the last hour, one per 10 min for a day, one per hour
    # for a week; older monitor snapshots are dropped (the baseline is always kept)
    tiers: list[tuple[Number, Number]] = Field(
        default_factory=lambda: [(3600.0, 0.0), (86400.0, 600.0), (604800.0, 3600.0)],
        max_length=MAX_LIST,
        description="monitor down-sampling: [max age s, spacing s] per tier",
    )

    @field_validator("tiers")
    @classmethod
    def _ordered(cls, tiers: list[tuple[float, float]]) -> list[tuple[float, float]]:
        ages = [age for age, _ in tiers]
        if any(age <= 0 for age in ages) or ages != sorted(set(ages)):
            raise ValueError("tiers must have positive ages, each older than the one before")
        if any(spacing < 0 for _, spacing in tiers):
            raise ValueError("a tier's spacing cannot be negative")
        return tiers


class MonitorConfig(_Section):
    interval_s: Number = Field(60.0, gt=0, le=86400, description="seconds between cycle starts")
    window_s: Number = Field(3.0, ge=0, le=600, description="collection window of each cycle")
    ebpf: Literal["auto", "on", "off"] = Field("off", description="eBPF tier of each cycle")
    noise_pct: Number = Field(
        20.0,
        gt=0,
        le=10_000,
        description="a metric must move this much (% of the baseline) to regress",
    )
    collectors_off: list[Text] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description='collectors each cycle skips, e.g. ["pci", "disk"]',
    )

    @field_validator("collectors_off")
    @classmethod
    def _known_collectors(cls, names: list[str]) -> list[str]:
        if names:  # importing every collector takes a while: only when some are named
            from wp_mcp.collectors.registry import COLLECTORS, load

            known = [load(spec).name for spec in COLLECTORS]
            unknown = [name for name in names if name not in known]
            if unknown:
                raise ValueError(
                    f"no collector {excerpt(unknown[0])}; collectors: {', '.join(known)}"
                )
        return names


class MetricsConfig(_Section):
    enabled: Flag = Field(False, description="serve Prometheus /metrics")
    bind: Text = Field("127.0.0.1:9464", description="loopback address:port of /metrics")

    @field_validator("bind")
    @classmethod
    def _loopback(cls, value: str) -> str:
        parse_bind(value)
        return value


class EventsFileConfig(_Section):
    path: Text | None = Field(None, description="JSON-lines events file (none: off)")
    max_bytes: Count = Field(10 << 20, ge=4096, le=1 << 40, description="rotated beyond this size")
    backups: Count = Field(3, ge=0, le=100, description="rotated files kept (.1, .2...)")


class WebhooksConfig(_Section):
    urls: list[Text] = Field(
        default_factory=list,
        max_length=MAX_WEBHOOKS,
        description="POST each event to these URLs",
    )
    timeout_s: Number = Field(
        5.0, gt=0, le=120, description="per POST; a receiver down or slow is retried"
    )
    retries: Count = Field(
        5, ge=0, le=100, description="more tries of an event the receiver answered with an error"
    )
    queue: Count = Field(1000, ge=1, le=1_000_000, description="events held per URL at most")
    min_priority: Literal["P0", "P1", "P2"] = Field(
        "P2", description="push findings of this priority or higher (P0 highest)"
    )
    hold_s: Number = Field(
        0.0,
        ge=0,
        le=7 * 86400,
        description="push a finding or regression once it has lasted this long (Prometheus' "
        "`for`); one that ends sooner is never pushed",
    )

    @field_validator("urls")
    @classmethod
    def _http(cls, urls: list[str]) -> list[str]:
        for url in urls:
            check_webhook_url(url)
        return urls


class OutputsConfig(_Section):
    stdout: Flag = Field(True, description="events as JSON lines on stdout")
    events_file: EventsFileConfig = Field(default_factory=EventsFileConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)


class ServeConfig(_Section):
    allow_dirs: list[Text] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description="wp_open may also import below these folders",
    )
    host: Text = Field("127.0.0.1", description="http bind address (off loopback: a token)")
    port: Count = Field(8765, ge=0, lt=65536, description="http port (0: any free port)")
    token_file: Text | None = Field(None, description="http bearer token: this file's first line")


class RedactionConfig(_Section):
    patterns: list[Text] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description="regexes redacted from command lines too (a `value` group, else the match)",
    )

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a pattern is over {MAX_PATTERN_CHARS} characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{excerpt(pattern)} is not a regex: {exc}") from None
        return patterns


class Config(_Section):
    store: StoreConfig = Field(default_factory=StoreConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    redaction: RedactionConfig = Field(default_factory=RedactionConfig)


# Environment variables that set a value: (dotted key, variable).
ENV_KEYS = (("store.path", "WP_MCP_STORE"), ("store.keep", "WP_MCP_KEEP"))
# ... and how each one's text becomes the key's value (the store reads $WP_MCP_KEEP itself)
ENV_VALUES = {"store.keep": lambda: int(env_keep())}


class Loaded:
    """The effective config and where each value came from (default, file, env, flag)."""

    def __init__(self, config: Config, path: Path | None, sources: dict[str, str]) -> None:
        self.config = config
        self.path = path
        self.sources = sources

    def set_flag(self, key: str, value: Any) -> None:
        """A command-line flag's value (None: not given), which beats every other source."""
        if value is None:
            return
        _assign(self.config, key, value, "command line")
        self.sources[key] = "flag"

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")


# Command-line flags (argparse destinations) and the key each sets when given.
FLAG_KEYS = {
    "store": "store.path",
    "interval": "monitor.interval_s",
    "window": "monitor.window_s",
    "ebpf": "monitor.ebpf",
    "events_file": "outputs.events_file.path",
    "webhook": "outputs.webhooks.urls",
    "host": "serve.host",
    "port": "serve.port",
    "token_file": "serve.token_file",
}


def from_args(args: Any) -> Loaded:
    """The effective config for a parsed command line: the file named by the global
    --config (or found), the environment, then this command's flags."""
    loaded = load(getattr(args, "config", None))
    for flag, key in FLAG_KEYS.items():
        loaded.set_flag(key, getattr(args, flag, None))
    if getattr(args, "quiet", False):
        loaded.set_flag("outputs.stdout", False)
    if getattr(args, "metrics", None):
        loaded.set_flag("outputs.metrics.bind", args.metrics)
        loaded.set_flag("outputs.metrics.enabled", True)
    return loaded


def load(explicit: str | None = None) -> Loaded:
    """The effective config: defaults, then the file, then the environment."""
    path = find_config(explicit)
    sources: dict[str, str] = {}
    config = Config()
    if path is not None:
        config = _parse(path)
        sources.update(dict.fromkeys(_keys(_read_toml(path)), f"file {path}"))
    for key, variable in ENV_KEYS:
        value = os.environ.get(variable)
        if value:
            parse = ENV_VALUES.get(key)
            _assign(config, key, parse() if parse else value, f"${variable}")
            sources[key] = f"env {variable}"
    return Loaded(config, path, sources)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read_text(path))
    except UnicodeDecodeError:
        raise UserError(f"config {shown(path)}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config {shown(path)}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays recursively
        raise UserError(f"config {shown(path)}: not valid TOML: nested too deeply") from None


def _read_text(path: Path) -> str:
    """A config file: a regular file of at most MAX_CONFIG_BYTES (graph/rawio's readers
    sniff for JSON, so the limits are applied here: stat before open, as they do, so a FIFO
    never blocks)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise UserError(f"config {shown(path)}: not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UserError(f"config {shown(path)}: cannot read: {describe_os_error(exc)}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"config {shown(path)}: over the {MAX_CONFIG_BYTES >> 10} KiB limit")
    return data.decode("utf-8")


def _parse(path: Path) -> Config:
    data = _read_toml(path)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"config {_mistakes(exc, path)}") from None


def _mistakes(exc: ValidationError, path: Path) -> str:
    """Every bad value of the file, each with its key and line, on one line."""
    text = _read_text(path)
    said = []
    for error in exc.errors(include_url=False):
        key = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
        line = _line_of(text, key)
        where = f"{shown(path)}, line {line}" if line else shown(path)
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        message = message.removeprefix("Value error, ")
        mistake = f"{where}: {excerpt(key, quoted=False)}: {excerpt(message, 200, quoted=False)}"
        if mistake not in said:
            said.append(mistake)
    more = len(said) - MAX_ERRORS_SHOWN
    return "; ".join(said[:MAX_ERRORS_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _line_of(text: str, key: str) -> int | None:
    """The line that sets dotted ``key``: its table header's section, then `name =`."""
    *tables, name = key.split(".")
    table = ".".join(tables)
    current = ""
    header = re.compile(r"\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")
    for number, line in enumerate(text.splitlines(), 1):
        found = header.match(line)
        if found:
            current = found.group(1).strip('"')
            if current == key:
                return number  # the key is a table
            continue
        assigned = line.split("=", 1)[0].strip().strip('"') if "=" in line else None
        if assigned is None:
            continue
        if (current == table and assigned == name) or (not current and assigned == key):
            return number
    return None


def _keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, value in data.items():
        key = f"{prefix}{name}"
        out += _keys(value, key + ".") if isinstance(value, dict) else [key]
    return out


def _assign(config: Config, key: str, value: Any, origin: str) -> None:
    *tables, name = key.split(".")
    section: BaseModel = config
    for table in tables:
        section = getattr(section, table)
    try:
        setattr(section, name, value)
    except ValidationError as exc:
        message = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        raise UserError(f"{origin}: {key}: {excerpt(message, 200, quoted=False)}") from None


def check_webhook_url(url: str) -> None:
    """An http(s) URL with a host and nothing a request line could not carry (a blank, a line
    break or a control character would break the sender on every event)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {excerpt(url)}")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise ValueError(f"a blank or control character in the URL {excerpt(url)}")
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError as exc:
        raise ValueError(f"not a URL: {excerpt(url)}: {exc}") from None
    if not host:
        raise ValueError(f"no host in the URL {excerpt(url)}")


def parse_bind(text: str) -> tuple[str, int]:
    """A loopback ``host:port``; anything reachable from elsewhere is refused."""
    found = _BIND.match(text)
    host = found.group("host").strip("[]") if found else ""
    if not found or not (host.startswith("127.") or host in ("::1", "localhost")):
        raise ValueError(f"expected a loopback address:port such as 127.0.0.1:9464, got {excerpt(text)}")  # fmt: skip
    port = int(found.group("port"))
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {excerpt(text)}")
    return host, port


def effective(loaded: Loaded) -> list[tuple[str, Any, str]]:
    """(key, value, source) for every leaf of the effective config."""
    rows: list[tuple[str, Any, str]] = []

    def walk(section: BaseModel, prefix: str) -> None:
        for name in type(section).model_fields:
            value = getattr(section, name)
            key = f"{prefix}{name}"
            if isinstance(value, BaseModel):
                walk(value, key + ".")
            else:
                rows.append((key, value, loaded.source(key)))

    walk(loaded.config, "")
    return rows


def to_toml(value: Any) -> str:
    """A value as TOML (the types a config holds: none, bool, number, text, lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(to_toml(item) for item in value) + "]"
    raise TypeError(type(value))


def commented_default() -> str:
    """`config init`'s file: every section and key with its default and what it does."""
    lines = [
        "# wp-mcp config (docs/monitoring.md). Precedence: flags > env > this file > defaults."
    ]

    def walk(model: type[BaseModel], table: str) -> None:
        nested = []
        lines.append(f"\n[{table}]" if table else "")
        default = model()
        for name, field in model.model_fields.items():
            value = getattr(default, name)
            if isinstance(value, BaseModel):
                nested.append((type(value), f"{table}.{name}" if table else name))
                continue
            if field.description:
                lines.append(f"# {field.description}")
            lines.append(f'# {name} = ""' if value is None else f"{name} = {to_toml(value)}")
        for sub, sub_table in nested:
            walk(sub, sub_table)

    walk(Config, "")
    return "\n".join(line for line in lines if line is not None).replace("\n\n\n", "\n\n") + "\n"
