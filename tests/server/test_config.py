"""The config file: where it is found, what beats what, and how a mistake is said.

Precedence is flags > environment > file > defaults; a wrong key or type is one line that
names the key, the file and the line, with exit code 2 (never a traceback).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from wp_mcp.graph.redact import redact_text
from wp_mcp.graph.store import Store
from wp_mcp.server import config, config_file
from wp_mcp.server.cli import main
from wp_testdata import WITTY_GRAPH as WITTY

GOOD = """\
# a comment
[monitor]
interval_s = 10
window_s = 0.5

[outputs.metrics]
enabled = true
bind = "127.0.0.1:9999"
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No config of this machine's user or /etc leaks in: the search path is in tmp."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("WP_MCP_CONFIG", raising=False)
    monkeypatch.delenv("WP_MCP_KEEP", raising=False)
    monkeypatch.setattr(config_file, "search_path", lambda: [tmp_path / "xdg/wp-mcp/config.toml"])


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wp_mcp.server.cli", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_defaults_without_a_file() -> None:
    loaded = config.load()
    assert loaded.path is None
    assert loaded.config.monitor.interval_s == 60
    assert loaded.source("monitor.interval_s") == "default"


def test_file_values_and_their_source(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    loaded = config.load(str(path))
    assert loaded.config.monitor.interval_s == 10
    assert loaded.config.outputs.metrics.bind == "127.0.0.1:9999"
    assert loaded.source("monitor.window_s") == f"file {path}"
    assert loaded.source("monitor.ebpf") == "default"


def test_precedence_flag_over_env_over_file(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, '[store]\nkeep = 7\npath = "/from/file"\n')
    monkeypatch.setenv("WP_MCP_CONFIG", str(path))
    monkeypatch.setenv("WP_MCP_KEEP", "9")
    loaded = config.load()
    assert loaded.path == path
    assert (loaded.config.store.keep, loaded.source("store.keep")) == (9, "env WP_MCP_KEEP")
    assert loaded.source("store.path") == f"file {path}"
    loaded.set_flag("store.path", str(tmp_path / "flag"))
    assert loaded.config.store.path == str(tmp_path / "flag")
    assert loaded.source("store.path") == "flag"


def test_search_path_finds_the_user_file(tmp_path: Path) -> None:
    user_file = tmp_path / "xdg/wp-mcp/config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("[monitor]\ninterval_s = 5\n")
    assert config.load().config.monitor.interval_s == 5


@pytest.mark.parametrize(
    ("text", "key", "line", "says"),
    [
        ("[monitor]\nintervl_s = 5\n", "monitor.intervl_s", 2, "unknown key"),
        ("[monitor]\nwindow_s = 1\n\ninterval_s = 'soon'\n", "monitor.interval_s", 4, "number"),
        ('[outputs.metrics]\nbind = "0.0.0.0:9100"\n', "outputs.metrics.bind", 2, "loopback"),
        ('[outputs.webhooks]\nurls = ["ftp://x"]\n', "outputs.webhooks.urls", 2, "http"),
        ("colour = 1\n", "colour", 1, "unknown key"),
        ("[store]\ntiers = [[600, 0], [60, 10]]\n", "store.tiers", 2, "older than"),
        ('[monitor]\ncollectors_off = ["pcie"]\n', "monitor.collectors_off", 2, "procfs"),
    ],
)
def test_a_mistake_names_key_file_and_line(tmp_path, capsys, text, key, line, says) -> None:
    path = write(tmp_path, text)
    assert main(["--config", str(path), "config", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"{path}, line {line}: {key}:" in err and says in err


DEEP_ARRAY = "[" * 5000 + "]" * 5000
MANY_URLS = ", ".join(['"http://127.0.0.1:9/hook"'] * 10_000)
MANY_PATTERNS = ", ".join(['"x"'] * 100)


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        # strict types: TOML's booleans are no numbers (pydantic's lax mode made them 1)
        ("[store]\nkeep = true\n", "store.keep", "integer"),
        ("[monitor]\ninterval_s = true\n", "monitor.interval_s", "number"),
        ("[store]\nkeep = 3.0\n", "store.keep", "integer"),
        ('[store]\nkeep = "3"\n', "store.keep", "integer"),
        ("[outputs]\nstdout = 1\n", "outputs.stdout", "boolean"),
        # finite numbers
        ("[store]\ntiers = [[nan, 0]]\n", "store.tiers", "finite"),
        ("[store]\ntiers = [[3600, nan]]\n", "store.tiers", "finite"),
        ("[monitor]\nnoise_pct = inf\n", "monitor.noise_pct", "finite"),
        ("[monitor]\nwindow_s = -inf\n", "monitor.window_s", "finite"),
        # bounded sizes
        ("[store]\nkeep = 99999999999999999999\n", "store.keep", "less than"),
        (
            "[outputs.events_file]\nmax_bytes = 9999999999999999999999\n",
            "outputs.events_file.max_bytes",
            "less than",
        ),  # fmt: skip
        (f"[outputs.webhooks]\nurls = [{MANY_URLS}]\n", "outputs.webhooks.urls", "at most"),
        (f"[redaction]\npatterns = [{MANY_PATTERNS}]\n", "redaction.patterns", "at most"),
        (f'[store]\npath = "{"a" * 5000}"\n', "store.path", "at most"),
        # a webhook URL a request line cannot carry
        ('[outputs.webhooks]\nurls = ["http://a b/"]\n', "outputs.webhooks.urls", "blank"),
        ('[outputs.webhooks]\nurls = ["http://a/\\nb"]\n', "outputs.webhooks.urls", "blank"),
        ('[outputs.webhooks]\nurls = ["http:///x"]\n', "outputs.webhooks.urls", "no host"),
    ],
)
def test_hostile_values_are_refused_naming_the_key(tmp_path, capsys, text, key, says) -> None:
    path = write(tmp_path, text)
    assert main(["--config", str(path), "config", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and len(err) < 1200
    assert f"{path}, line 2: {key}:" in err and says in err


def test_every_bad_value_is_named_on_the_one_line(tmp_path, capsys) -> None:
    path = write(
        tmp_path, "[store]\nkeep = true\n\n[monitor]\ninterval_s = true\nnoise_pct = nan\n"
    )
    assert main(["--config", str(path), "config", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    for key, line in (("store.keep", 2), ("monitor.interval_s", 5), ("monitor.noise_pct", 6)):
        assert f"line {line}: {key}:" in err


def test_deeply_nested_toml_is_one_line(tmp_path, capsys) -> None:
    path = write(tmp_path, f"[monitor]\ninterval_s = {DEEP_ARRAY}\n")
    assert main(["--config", str(path), "config", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nested too deeply" in err and "\n" not in err


def test_a_refused_config_deletes_no_snapshot(tmp_path, capsys) -> None:
    """`keep = true` once became keep = 1 and the next write deleted every other snapshot."""
    store = tmp_path / "s"
    for n in range(3):
        assert main(["--store", str(store), "import", str(WITTY), "--label", f"n{n}"]) == 0
    capsys.readouterr()
    path = write(tmp_path, "[store]\nkeep = true\n")
    assert main(["--config", str(path), "--store", str(store), "import", str(WITTY)]) == 2
    assert "store.keep" in capsys.readouterr().err
    assert len(Store(store).list()) == 3


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WP_MCP_KEEP", "abc"),
        ("WP_MCP_KEEP", "1e23"),
        ("WP_MCP_KEEP", "-1"),
        ("WP_MCP_MAX_FILE_MB", "2G"),
        ("WP_MCP_MAX_FILE_MB", "nan"),
    ],  # fmt: skip
)
def test_a_bad_environment_number_is_one_line_naming_it(tmp_path, variable, value) -> None:
    env = {**os.environ, variable: value}
    done = subprocess.run(
        [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(tmp_path / "s"),
         "import", str(WITTY)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and f"${variable}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    # a command that reads no file and keeps no count is not broken by it
    done = subprocess.run([sys.executable, "-m", "wp_mcp.server.cli", "--help"],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr


def test_bad_toml_and_missing_file_are_one_line(tmp_path: Path, capsys) -> None:
    broken = write(tmp_path, "[monitor\n")
    assert main(["--config", str(broken), "config", "show"]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "absent.toml"), "config", "show"]) == 2
    assert "no config file" in capsys.readouterr().err


def test_monitor_exits_2_naming_the_key(tmp_path: Path) -> None:
    """The daemon refuses a broken config before it collects anything."""
    path = write(tmp_path, "[monitor]\ninterval_s = -1\n")
    done = cli("--config", str(path), "--store", str(tmp_path / "s"), "monitor", "--once")
    assert done.returncode == 2
    assert "monitor.interval_s" in done.stderr and "line 2" in done.stderr
    assert not (tmp_path / "s").exists()


def test_show_prints_values_and_sources(tmp_path: Path, capsys, monkeypatch) -> None:
    path = write(tmp_path, GOOD)
    monkeypatch.setenv("WP_MCP_STORE", str(tmp_path / "store"))
    assert main(["--config", str(path), "config", "show"]) == 0
    out = capsys.readouterr().out
    assert f"monitor.interval_s = 10.0  # file {path}" in out
    assert 'monitor.ebpf = "off"  # default' in out
    assert f'store.path = "{tmp_path / "store"}"  # env WP_MCP_STORE' in out


def test_init_writes_a_commented_default_that_loads_back(tmp_path: Path, capsys) -> None:
    target = tmp_path / "new.toml"
    assert main(["config", "init", str(target)]) == 0
    text = target.read_text()
    assert "[outputs.webhooks]" in text and "# seconds between cycle starts" in text
    assert target.stat().st_mode & 0o777 == 0o600
    assert config.Config.model_validate(tomllib.loads(text)) == config.Config()
    assert main(["config", "init", str(target)]) == 2  # never replaced without --force
    assert "--force" in capsys.readouterr().err


def serve_args(*argv: str):
    from wp_mcp.server.cli import build_parser
    from wp_mcp.server.cli.serve import apply_config

    args = build_parser("serve").parse_args([*argv])
    apply_config(args)
    return args


def test_serve_takes_what_no_flag_set_from_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WP_MCP_TOKEN", raising=False)
    monkeypatch.delenv("WP_MCP_STORE", raising=False)
    path = write(
        tmp_path,
        f"""[serve]
allow_dirs = ["{tmp_path}"]
host = "127.0.0.2"
port = 9000
token_file = "{tmp_path / "token"}"
[store]
path = "{tmp_path / "store"}"
""",
    )
    args = serve_args("--config", str(path), "serve", "--allow-dir", "/srv")
    assert (args.host, args.port, args.store) == ("127.0.0.2", 9000, str(tmp_path / "store"))
    assert args.allow_dir == [str(tmp_path), "/srv"] and args.token_file == str(tmp_path / "token")
    flags = serve_args(
        "--config", str(path), "--store", "/s", "serve", "--port", "1", "--token", "t"
    )
    assert (flags.port, flags.store, flags.token_file) == (1, "/s", None)
    monkeypatch.setenv("WP_MCP_TOKEN", "from-env")
    assert serve_args("--config", str(path), "serve").token_file is None


def test_redaction_patterns_are_added_to_the_built_in_rules(tmp_path: Path, monkeypatch) -> None:
    """A live collection with the file's pattern stores the matching argument redacted; the
    built-in rules still apply beside it."""
    monkeypatch.setenv("WP_MCP_STORE", str(tmp_path / "store"))
    path = write(tmp_path, '[redaction]\npatterns = ["corp-[0-9]{6}", "site=(?P<value>\\\\w+)"]\n')
    marker = f"corp-{os.getpid() % 900000 + 100000}"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker,
                               "site=berlin", "--password=hunter2"])  # fmt: skip
    try:
        assert (
            main(["--config", str(path), "collect", "--duration", "0", "--pid", str(holder.pid)])
            == 0
        )
    finally:
        holder.kill()
        holder.wait(timeout=30)
    cmdline = Store(tmp_path / "store").get("latest").node(f"proc:{holder.pid}").get("cmdline")
    assert marker not in cmdline and "berlin" not in cmdline and "hunter2" not in cmdline
    assert "site=<redacted>" in cmdline and "time.sleep(120)" in cmdline
    main(["config", "show"])  # without the file: the patterns are gone for later commands
    assert redact_text(marker) == marker
