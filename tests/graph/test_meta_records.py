"""A snapshot's metadata (``Meta``) and a collector's status (``CollectorStatus``) are plain
records with a pydantic model's public face: declared attributes with their defaults, extra
keys kept, ``model_validate`` / ``model_dump`` / ``model_extra`` / ``model_copy``. pydantic
checks whatever is built from values, with its own messages; an empty ``Meta()`` and reading
attributes load no pydantic (a page answered from the store's rows relies on it)."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError
from wp_fresh import fresh_python
from wp_mcp.graph.model import CollectorStatus, Meta

DECLARED = [
    "format", "version", "hosts", "started_at", "window_s", "collectors", "capabilities",
    "tool_version", "origin",
]  # fmt: skip


def test_the_model_an_empty_meta_and_its_attributes_load_no_pydantic():
    code = (
        "import json, sys\n"
        "from wp_mcp.graph.model import Meta, ProcessNode\n"
        "meta = Meta()\n"
        "meta.hosts.append('h1')\n"
        "assert Meta().hosts == [] and meta.format == 'wp-graph' and meta.version == 1\n"
        "node = ProcessNode.from_dict({'id': 'proc:1', 'kind': 'process', 'pid': 1})\n"
        "assert node.pid == 1 and node.cmdline is None\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "    ('pydantic', 'pydantic_core', 'typing_extensions', 'annotated_types'))))\n"
    )
    assert json.loads(fresh_python(code)) == []


def test_values_are_coerced_and_refused_as_pydantic_does():
    assert Meta(window_s=1).window_s == 1.0 and type(Meta(window_s=1).window_s) is float
    assert Meta.model_validate({"version": "1"}).version == 1
    with pytest.raises(ValidationError) as refused:
        Meta.model_validate({"collectors": [{"name": "a", "status": "bad", "duration_s": -1}]})
    errors = refused.value.errors(include_url=False)
    assert [e["loc"] for e in errors] == [
        ("collectors", 0, "status"),
        ("collectors", 0, "duration_s"),
    ]
    assert errors[1]["msg"] == "Input should be greater than or equal to 0"
    with pytest.raises(ValidationError, match="valid dictionary or instance of Meta"):
        Meta.model_validate(["not", "a", "dict"])
    with pytest.raises(ValidationError, match="Field required"):
        CollectorStatus(status="ok")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        Meta(window_s=-1.0)


def test_records_nested_in_values_are_taken_as_their_values():
    status = CollectorStatus(name="procfs", status="partial", reason="no root")
    meta = Meta(hosts=["h1"], collectors=[status])
    assert meta.collectors == [status] and meta.collectors[0] is not status
    assert Meta.model_validate(meta) is meta  # already a Meta: as pydantic returns a model


def test_extra_keys_are_kept_and_read_and_set_as_attributes():
    meta = Meta.model_validate({"hosts": ["h1"], "witty_env": {"rank": 0}})
    assert meta.witty_env == {"rank": 0}
    meta.trace = {"ranks": 2}  # importers add facts after reading
    assert meta.model_extra == {"witty_env": {"rank": 0}, "trace": {"ranks": 2}}
    meta.model_extra["trace"] = "redacted"  # the live dict: redaction rewrites extras in it
    assert meta.trace == "redacted"
    with pytest.raises(AttributeError):
        _ = meta.never_set


def test_a_dump_lists_declared_attributes_in_order_then_extras():
    meta = Meta(hosts=["h1"], collectors=[CollectorStatus(name="procfs", status="ok")])
    meta.unset = None
    meta.pair = (1, 2)
    meta.capabilities["btf"] = None
    assert list(meta.model_dump()) == [*DECLARED, "unset", "pair"]
    assert meta.model_dump(exclude_none=True) == {
        "format": "wp-graph",
        "version": 1,
        "hosts": ["h1"],
        "collectors": [{"name": "procfs", "status": "ok"}],
        "capabilities": {"btf": None},  # None inside a value is kept, as pydantic keeps it
        "pair": (1, 2),
    }
    assert meta.model_dump(mode="json", exclude_none=True)["pair"] == [1, 2]
    assert Meta.model_validate(meta.model_dump()) == meta


def test_copies_never_share_what_they_hold():
    status = CollectorStatus(name="procfs", status="ok", duration_s=0.5)
    renamed = status.model_copy(update={"name": "h1/procfs", "host": "h1"})
    assert (renamed.name, renamed.host, renamed.duration_s) == ("h1/procfs", "h1", 0.5)
    assert status.name == "procfs" and status.model_extra == {}
    meta = Meta(hosts=["h1"])
    meta.trace = {"ranks": [0]}
    deep = copy.deepcopy(meta)
    deep.trace["ranks"].append(1)
    deep.hosts.append("h2")
    assert (meta.hosts, meta.trace) == (["h1"], {"ranks": [0]}) and deep != meta
