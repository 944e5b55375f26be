"""The Ray driver against node streams that are not what they claim (issue 32.10), crafted
here without a cluster: a gzip bomb and a graph wrapped in a gigabyte of blanks are refused
while they inflate, within a few MB; every node's stream of one collection shares one
budget; bytes after a graph's end are refused; a parsed stream gives its bytes back. And
what Ray prints on the driver's stdout goes to stderr: stdout carries the id alone."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tracemalloc
import zlib

import pytest
from wp_mcp.collectors.cluster.on_ray import GraphStream, StreamBudget
from wp_mcp.graph import Graph, Meta, UserError, native
from wp_mcp.graph.rawio import MAX_GZIP_RATIO

MIB = 1 << 20


def repeated_gzip(head: bytes, filler: bytes, copies: int, tail: bytes = b"") -> bytes:
    """A gzip stream of ``head``, ``copies`` × ``filler`` and ``tail``, written without
    compressing all of it: after a full flush, each filler compresses to the same block."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(filler) + deflate.flush(zlib.Z_FULL_FLUSH)
    return start + block * copies + deflate.compress(tail) + deflate.flush()


def node_graph(host: str) -> Graph:
    graph = Graph(Meta(hosts=[host], origin="test node"))
    for pid in range(1, 200):
        graph.add("process", f"{host}/proc:{pid}", pid=pid, comm=f"worker-{pid}")
    return graph


def fed_in_chunks(stream: GraphStream, packed: bytes, chunk: int = 4 * MIB) -> None:
    for start in range(0, len(packed), chunk):
        stream.feed(packed[start : start + chunk])


def peak_mib(run) -> float:
    tracemalloc.start()
    try:
        run()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / MIB


def test_a_gzip_bomb_is_refused_while_it_inflates() -> None:
    bomb = repeated_gzip(b"", b"\0" * MIB, 1500)  # ~1.5 MB that would inflate to 1.5 GiB
    stream = GraphStream("bomb")

    def feed() -> None:
        with pytest.raises(UserError, match=f"'bomb' decompresses over {MAX_GZIP_RATIO}:1"):
            fed_in_chunks(stream, bomb)

    assert peak_mib(feed) < 40  # the bomb's own bytes and a few MB it inflated to
    assert stream.budget.held == 0


def test_a_graph_in_a_gigabyte_of_blanks_is_refused_within_a_few_mb() -> None:
    body = native.dumps(node_graph("n1"))
    padded = repeated_gzip(body[:1], b" " * MIB, 1000, body[1:])  # `{` blanks… the rest

    def feed() -> None:
        with pytest.raises(UserError, match="decompresses over"):
            fed_in_chunks(GraphStream("n1"), padded)

    assert peak_mib(feed) < 40


def test_every_node_stream_shares_one_budget() -> None:
    packed = gzip.compress(native.dumps(node_graph("n1")))
    raw = len(gzip.decompress(packed))
    budget = StreamBudget(limit=raw + raw // 2)  # one graph fits, not two at once
    first, second = GraphStream("n1", budget=budget), GraphStream("n2", budget=budget)
    first.feed(packed[:-64])  # all but its end: held, not yet parsed
    with pytest.raises(UserError, match="'n2' does not fit in what the nodes' streams"):
        second.feed(packed)
    first.feed(packed[-64:])
    assert len(first.graph().of_kind("process")) == 199
    assert budget.held == 0  # parsed: its bytes are given back
    third = GraphStream("n3", budget=budget)
    third.feed(packed)  # the budget serves the next node
    assert third.graph().of_kind("process")


def test_bytes_after_the_end_of_a_graph_are_refused() -> None:
    packed = gzip.compress(native.dumps(node_graph("n1"))) + b"more"
    stream = GraphStream("n1")
    with pytest.raises(UserError, match="'n1' has data after its end"):
        stream.feed(packed)
    assert stream.budget.held == 0


GUARDED = r"""
import os, sys
from wp_mcp.server.cli.stdout_guard import stdout_for_result
print("before the collection, buffered")
result = stdout_for_result()
os.write(1, b"\x1b[36m(raylet)\x1b[0m A worker died or was killed\n")  # as Ray's C++ does
print("(pid=123) a worker's print")
sys.stdout.flush()
print("s1234abc", file=result)
"""


def test_stdout_carries_the_result_alone() -> None:
    """`ID=$(wp-mcp collect --cluster ray)`: what Ray writes to fd 1 goes to stderr."""
    done = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout == "before the collection, buffered\ns1234abc\n"
    assert "(raylet)" in done.stderr and "a worker's print" in done.stderr
