"""The picture (converters/picture.py): what is drawn where, read like lstopo.

The witty capture's main finding — four ranks whose CPU time runs away from their NPUs'
NUMA node — must be visible in the picture itself: each rank in the box of the node where
its CPU time runs, a P0 line to its NPU in the NPU's box, and the finding's title attached.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wp_mcp.converters import count_tokens
from wp_mcp.converters.formats import picture_dot, picture_mermaid, picture_svg
from wp_mcp.converters.html import asset, elk_version, render_html
from wp_mcp.converters.picture import MAX_PROCESSES, build_picture
from wp_mcp.graph.graph import Graph
from wp_mcp.skills import diagnose
from wp_require import unavailable
from wp_synthetic import cluster_graph

RANKS = {  # rank → (its NPU, the NUMA node its NPU is on, where its CPU time mostly runs)
    "proc:1895087": ("npu:0", "numa:6", "numa:7"),
    "proc:1895088": ("npu:1", "numa:6", "numa:1"),
    "proc:1895089": ("npu:2", "numa:4", "numa:6"),
    "proc:1895090": ("npu:3", "numa:4", "numa:7"),
}
ASSETS = Path(__file__).resolve().parents[2] / "converters" / "assets"


@pytest.fixture(scope="module")
def witty_picture(witty):
    return build_picture(witty, diagnose(witty).findings)


def test_each_numa_node_is_a_box_with_its_cpus_and_memory(witty_picture):
    numa = [b for b in witty_picture.boxes if b.kind == "numa"]
    assert [b.id for b in numa] == [f"numa:{n}" for n in range(8)]
    assert all(b.parent == "host" for b in numa)
    assert numa[6].label.splitlines()[:2] == ["NUMA 6", "CPUs 144-167"]
    assert re.fullmatch(r"126G, 57G free", numa[6].label.splitlines()[2])


def test_each_npu_sits_in_its_numa_nodes_box(witty_picture, witty):
    npus = [b for b in witty_picture.boxes if b.id.startswith("npu:")]
    assert len(npus) == 8
    for box in npus:
        assert box.parent == f"numa:{witty.nodes[box.id].get('numa_node')}"


def test_ranks_sit_where_their_cpu_time_runs_with_a_p0_line_to_their_npu(witty_picture):
    for rank, (npu, npu_home, cpu_home) in RANKS.items():
        box = witty_picture.box(rank)
        assert box.parent == cpu_home and box.priority == "P0"
        assert witty_picture.box(npu).parent == npu_home
        [link] = [x for x in witty_picture.links if x.src == rank and x.dst == npu]
        assert link.kind == "uses" and link.priority == "P0"
        assert link.label.endswith(f"on N{npu_home.split(':')[1]}")  # shares on the NPU's node


def test_a_p0_marks_the_rank_and_its_npu_with_the_findings_title(witty_picture):
    p0 = [m for m in witty_picture.marks if m.priority == "P0"]
    assert len(p0) == 4
    assert {tuple(m.subjects) for m in p0} == {(rank, npu) for rank, (npu, _, _) in RANKS.items()}
    assert all("runs" in m.title and "NUMA" in m.title for m in p0)
    for mark in p0:  # the evidence chain comes along: the rank's CPU shares by node
        rank = mark.subjects[0]
        assert any(e.startswith(f"{rank}: cpu_share={{") for e in mark.evidence), mark.evidence
    # marks are ordered most urgent first, and a box lists the marks naming it
    assert [m.priority for m in witty_picture.marks] == sorted(
        m.priority for m in witty_picture.marks
    )
    assert 0 in witty_picture.box("npu:0").marks


def test_containers_know_the_most_urgent_finding_inside_them(witty_picture):
    inner = {b.id: b.inner_priority for b in witty_picture.boxes if b.kind in ("host", "numa")}
    assert inner["host"] == "P0" and inner["numa:7"] == "P0" and inner["numa:6"] == "P0"
    assert inner["numa:0"] is None and inner["numa:5"] is None  # nothing marked there


def test_unrelated_processes_are_folded_into_a_count(witty_picture, witty):
    shown = [b for b in witty_picture.boxes if b.kind == "process"]
    folded = witty_picture.box("folded:processes")
    total = len(list(witty.of_kind("process")))
    assert folded is not None and folded.parent == "host"
    assert folded.label.startswith(f"+{total - len(shown)} other processes")


def _host_with_idle_processes(count: int, name_of_400: str = "worker400") -> Graph:
    graph = Graph()
    graph.add("host", "host", hostname="busy", cpus=8)
    graph.add("numa_node", "numa:0", numa_id=0, cpulist="0-7", mem_total_bytes=1 << 34)
    graph.add("gpu", "gpu:0", index=0, numa_node=0)
    for pid in range(1, count + 1):
        name = name_of_400 if pid == 400 else f"worker{pid}"
        graph.add("process", f"proc:{pid}", pid=pid, name=name, cmdline=name, cpu_pct=0.0)
    graph.add_edge({"kind": "uses_device", "src": "proc:400", "dst": "gpu:0"})
    graph.add_edge({"kind": "parent_of", "src": "proc:7", "dst": "proc:400"})
    return graph


def test_a_host_with_500_processes_keeps_the_device_user_and_its_parent_and_folds_the_rest():
    picture = build_picture(_host_with_idle_processes(500))
    shown = {b.id for b in picture.boxes if b.kind == "process"}
    assert shown == {"proc:400", "proc:7"}
    assert picture.box("folded:processes").label == "+498 other processes\n498 idle"


def test_a_process_box_count_per_host_is_bounded():
    graph = _host_with_idle_processes(500)
    for pid in range(1, 200):
        graph.add_edge({"kind": "uses_device", "src": f"proc:{pid}", "dst": "gpu:0"})
    picture = build_picture(graph)
    assert len([b for b in picture.boxes if b.kind == "process"]) == MAX_PROCESSES


def test_a_cluster_draws_hosts_as_folded_boxes_holding_their_numa_nodes():
    picture = build_picture(cluster_graph(8))
    hosts = [b for b in picture.boxes if b.kind == "host"]
    assert len(hosts) == 8 and all(b.folded for b in hosts)
    assert {b.parent for b in picture.boxes if b.kind == "numa"} == {b.id for b in hosts}
    assert picture.title == "8 hosts"


def test_the_vendored_layout_library_is_the_one_the_lock_file_pins():
    lock = json.loads((ASSETS / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/elkjs"]["version"]
    assert json.loads((ASSETS / "package.json").read_text())["dependencies"]["elkjs"] == pinned
    assert elk_version() == pinned
    assert asset("elk.bundled.js").startswith("(function(f){")
    assert (ASSETS / "elk.LICENSE.md").read_text().startswith("# Eclipse Public License")


HOSTILE = '</script><script>alert(1)</script><!-- "\\ \u2028 \x1b[2J'


def _hostile_graph() -> Graph:
    return _host_with_idle_processes(400, name_of_400=HOSTILE)


def test_the_page_is_self_contained_and_a_host_string_cannot_close_its_script():
    page = render_html(build_picture(_hostile_graph(), title=HOSTILE))
    assert page.count("</script>") == 3  # the data, the layout library, the drawing script
    assert "<!--" not in page and "\u2028" not in page and "\x1b" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    data = page.split('id="wp-data">', 1)[1].split("</script>", 1)[0]
    names = [b["label"] for b in json.loads(data)["boxes"] if b["id"] == "proc:400"]
    assert names == [f"{HOSTILE}\npid 400 · 0% CPU"]  # the JSON carries the string intact


def test_dot_quotes_every_host_string():
    dot = picture_dot(build_picture(_hostile_graph()))
    label = next(line for line in dot.splitlines() if "alert" in line)
    assert '\\"' in label and "\\x1b" in label and "\x1b" not in dot
    assert re.search(r'label="[^"\\]*(\\.[^"\\]*)*"', label)


def test_svg_draws_numa_clusters_and_marks_the_ranks(witty_picture):
    if shutil.which("dot") is None:
        unavailable("graphviz's dot is not installed (.ci/setup.d/50-pictures.sh)")
    svg = picture_svg(witty_picture)
    # the host and the NUMA nodes holding something (NUMA 5, empty, is a plain box)
    assert svg.count('class="cluster"') == 1 + 7
    assert all(f"NUMA {n}" in svg for n in range(8))
    for rank in RANKS:
        assert f"pid {rank.split(':')[1]}" in svg
    assert svg.count('stroke="#d7191c"') >= 8  # four ranks, their NPUs (and the lines)


def test_show_writes_the_page_through_outfile(tmp_path, witty_path):
    target = tmp_path / "witty.html"
    subprocess.run(
        [_wp_mcp(), "show", str(witty_path), "--format", "html", "--out", str(target)], check=True
    )
    assert target.stat().st_mode & 0o777 == 0o600
    assert "npu:0" in target.read_text() and 'id="wp-data"' in target.read_text()


def test_show_refuses_to_write_a_picture_to_a_device(tmp_path, witty_path):
    node = tmp_path / "null"
    os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))  # a char device in our own tmp dir
    result = subprocess.run(
        [_wp_mcp(), "show", str(witty_path), "--format", "svg", "--out", str(node)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "character device" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def _wp_mcp() -> str:
    return str(Path(sys.executable).parent / "wp-mcp")


def test_mermaid_writes_host_strings_as_entity_codes():
    text = picture_mermaid(build_picture(_hostile_graph()), 4000)
    line = next(x for x in text.splitlines() if "alert" in x)
    label = line.split('["', 1)[1].rsplit('"]', 1)[0]
    assert '"' not in label and "<" not in label and "\x1b" not in label
    assert "#34;" in label and "#60;/script#62;" in label  # shown as the name is


def test_a_mermaid_picture_steps_down_until_it_fits(witty_picture):
    full = picture_mermaid(witty_picture, 4000)
    small = picture_mermaid(witty_picture, 700)
    assert "detail: full" in full.splitlines()[0] and "tcp 906K" in full
    assert count_tokens(small) <= 700 and "detail: full" not in small.splitlines()[0]
    assert "subgraph" in small or "detail: hosts" in small


def test_numa_distances_are_the_slit_row_in_node_order_not_percentages() -> None:
    """The witty capture's NUMA nodes hold their row of the distance matrix (10 = local):
    the picture shows those numbers as `numactl -H` does, by node id."""
    from wp_mcp.graph.witty import load_witty
    from wp_testdata import WITTY_GRAPH

    graph = load_witty(WITTY_GRAPH)
    picture = build_picture(graph)
    numa = [node for node in graph.of_kind("numa_node") if node.get("distances")]
    assert numa
    for node in numa:
        shown = dict(picture.box(node.id).detail)["distances"]
        distances = node.get("distances")
        ordered = sorted(distances, key=int)
        assert shown == "{" + ",".join(f"{k}:{distances[k]}" for k in ordered) + "}"
        assert "%" not in shown
