"""Parsers that need no live host: container ids from cgroup paths, and procfs readers
pointed at a tree the test builds (secret redaction: tests/graph/test_redact.py)."""

from __future__ import annotations

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.containers import parse_cgroup
from wp_mcp.collectors.procfs import ProcfsCollector, cgroup_path, read_sysv_shm
from wp_mcp.graph import Graph
from wp_mcp.graph.redact import REDACTED

CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("path", "runtime", "pod"),
    [
        (f"/system.slice/docker-{CID}.scope", "docker", None),
        (f"/docker/{CID}", "docker", None),
        (f"/system.slice/libpod-{CID}.scope/container", "podman", None),
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_"
            f"90ab_cdef_1234567890ab.slice/cri-containerd-{CID}.scope",
            "containerd",
            "1234abcd-5678-90ab-cdef-1234567890ab",
        ),
        (
            f"/kubepods.slice/kubepods-podaaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee.slice/crio-{CID}.scope",
            "cri-o",
            "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        ),
        (
            f"/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/{CID}",
            "kubepods",
            "11111111-2222-3333-4444-555555555555",
        ),
    ],
)
def test_container_ids_from_cgroup_paths(path, runtime, pod):
    ref = parse_cgroup(path)
    assert ref is not None and ref.container_id == CID and ref.runtime == runtime
    assert ref.pod_uid == pod
    assert ref.cgroup_path.endswith((CID, f"{CID}.scope"))


@pytest.mark.parametrize("path", ["/", "/user.slice/user-0.slice/session-1.scope", "/init.scope"])
def test_host_processes_are_in_no_container(path):
    assert parse_cgroup(path) is None


def test_cgroup_v1_falls_back_to_the_cpu_controller():
    text = "12:memory:/m\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/s\n"
    assert cgroup_path(text) == "/docker/abc"
    assert cgroup_path("0::/work.slice\n") == "/work.slice"


def build_proc(root, pid, ppid, comm, threads=(), fds=None):
    """A minimal /proc/<pid> as the kernel lays it out."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "fdinfo").mkdir()
    fields = ["S", str(ppid)] + ["0"] * 17 + ["500"] + ["0"] * 17 + ["1"]
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    (d / "status").write_text(
        f"Name:\t{comm}\nUid:\t1000\t1000\t1000\t1000\nThreads:\t{1 + len(threads)}\n"
        "Cpus_allowed_list:\t0-3\nMems_allowed_list:\t0\nVmRSS:\t  2048 kB\n"
        "voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t2\n"
    )
    (d / "cmdline").write_bytes(b"trainer\0--token\0abc\0")
    (d / "cgroup").write_text(f"0::/system.slice/docker-{CID}.scope\n")
    (d / "io").write_text("rchar: 1\nwchar: 2\nread_bytes: 4096\nwrite_bytes: 8192\n")
    for tid in (pid, *threads):
        t = d / "task" / str(tid)
        t.mkdir(parents=True)
        t.joinpath("stat").write_text(
            f"{tid} (worker {tid}) R {ppid} "
            + " ".join(["0"] * 9)
            + " 100 50 "
            + " ".join(["0"] * 23)
            + " 3\n"
        )
    for fd, target in (fds or {}).items():
        (d / "fd" / str(fd)).symlink_to(target)
        (d / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t01\n")


def test_procfs_reads_a_built_tree(tmp_path):
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    (tmp_path / "sysvipc").mkdir()
    (tmp_path / "sysvipc" / "shm").write_text(
        "       key      shmid perms       size  cpid  lpid nattch\n"
        "        42          7   600      65536   100   101      2\n"
    )
    build_proc(tmp_path, 100, 1, "launcher")
    build_proc(tmp_path, 101, 100, "rank 0", threads=(102,),
               fds={3: "socket:[555]", 4: "pipe:[777]", 5: "/dev/nvidia0"})  # fmt: skip
    graph = Graph()
    outcome = ProcfsCollector().collect(graph, Context(proc_root=tmp_path))
    assert outcome.status == "ok" and outcome.details["processes"] == 2
    rank = graph.node("proc:101")
    assert rank.name == "rank 0" and rank.ppid == 100 and rank.uid == 1000
    assert rank.cmdline == f"trainer --token {REDACTED}"
    assert rank.rss_bytes == 2048 * 1024 and rank.io_write_bytes == 8192
    assert rank.cpus_allowed == "0-3" and rank.vol_ctxt_switches == 7
    assert rank.started_at == 1700000000 + 5.0 and rank.devices == ["/dev/nvidia0"]
    assert [n.id for n in graph.successors("proc:100", "parent_of")] == ["proc:101"]
    threads = {t.tid: t for t in graph.successors("proc:101", "has_thread")}
    assert set(threads) == {101, 102} and threads[102].cpu_time_s == 1.5
    assert threads[102].last_cpu == 3
    held = {e.dst: e for e in graph.out_edges("proc:101", "holds")}
    assert held["sock:555"].fd == 3 and held["pipe:777"].mode == "w"
    assert read_sysv_shm(tmp_path)[7] == {"key": 42, "size_bytes": 65536, "creator_pid": 100,
                                          "attached": 2}  # fmt: skip


def test_a_huge_command_line_is_cut_to_what_is_kept(tmp_path):
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    build_proc(tmp_path, 100, 1, "launcher")
    # 2 MiB of arguments (the kernel's limit): redaction reads only the arguments that can
    # show, whole, and the kept text ends with an ellipsis
    argv = [b"trainer", b"--password", b"pw"] + [b"a=" * 1024] * 1024
    (tmp_path / "100" / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    graph = Graph()
    ProcfsCollector().collect(graph, Context(proc_root=tmp_path))
    cmdline = graph.node("proc:100").cmdline
    assert cmdline.startswith(f"trainer --password {REDACTED} a=a=") and cmdline.endswith("…")
    assert len(cmdline) <= 4097
