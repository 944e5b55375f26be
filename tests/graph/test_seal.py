"""A native file this user's wp-mcp wrote is read as the store reads its own rows; any other
file, or a sealed one changed by a byte, is validated and checked as before."""

from __future__ import annotations

import os
import re

import orjson
import pytest
from wp_mcp.graph import formats, seal, validation, witty
from wp_mcp.graph.errors import FormatError
from wp_testdata import WITTY_GRAPH


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    """This test's user data folder (where the seal's key lives)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "wp-mcp"


@pytest.fixture
def validations(monkeypatch) -> list[int]:
    """How many lists of elements the validating reader checked."""
    calls: list[int] = []
    grouped = validation.validate_grouped

    def counted(items, classes, generic):
        calls.append(len(items))
        return grouped(items, classes, generic)

    monkeypatch.setattr(validation, "validate_grouped", counted)
    return calls


def graph_file(tmp_path, name: str = "graph.json"):
    path = tmp_path / name
    formats.dump(witty.load_witty(WITTY_GRAPH), path)
    return path


def test_a_sealed_file_reads_back_the_same_graph_without_validation(
    tmp_path, own_data, validations
):
    original = witty.load_witty(WITTY_GRAPH)
    path = graph_file(tmp_path)
    assert path.read_bytes().endswith(b'"}') and b'"wp_mcp_seal":"' in path.read_bytes()[-100:]
    key = own_data / seal.KEY_NAME
    assert key.stat().st_mode & 0o777 == 0o600
    validations.clear()
    graph = formats.load_any(path)
    assert validations == []  # trusted: wrapped as a store row is
    assert graph.checked
    assert {n.id: n.__dict__ for n in graph.nodes.values()} == {
        n.id: n.__dict__ for n in original.nodes.values()
    }
    assert [e.__dict__ for e in graph.edges()] == [e.__dict__ for e in original.edges()]


def test_a_changed_byte_another_key_or_no_seal_is_validated(tmp_path, own_data, validations):
    path = graph_file(tmp_path)
    data = path.read_bytes()
    # one value changed in a sealed file: the seal no longer verifies, the model refuses it
    forged = re.sub(rb'"tid":\d+', b'"tid":"abc"', data, count=1)
    (tmp_path / "forged.json").write_bytes(forged)
    validations.clear()
    with pytest.raises(FormatError) as refused:
        formats.load_any(tmp_path / "forged.json")
    assert validations and "\n" not in str(refused.value)
    validations.clear()
    (own_data / seal.KEY_NAME).write_bytes(os.urandom(32))  # another user's key
    formats.load_any(path)
    assert validations  # read through the validating reader
    validations.clear()
    unsealed = orjson.loads(data)
    unsealed.pop("wp_mcp_seal")
    (tmp_path / "plain.json").write_bytes(orjson.dumps(unsealed))
    formats.load_any(tmp_path / "plain.json")
    assert validations


def test_a_key_others_may_read_seals_and_trusts_nothing(tmp_path, own_data, validations):
    path = graph_file(tmp_path)
    (own_data / seal.KEY_NAME).chmod(0o644)
    validations.clear()
    formats.load_any(path)
    assert validations
    formats.dump(witty.load_witty(WITTY_GRAPH), tmp_path / "again.json")
    assert b"wp_mcp_seal" not in (tmp_path / "again.json").read_bytes()[-100:]
