"""`diagnose --job PID`: the report narrowed to one job — its rank group or process tree and
the host's findings that bear on it — leaving other processes' findings (wp-mcp's own among
them) out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from wp_mcp.graph import UserError
from wp_mcp.server.cli import main
from wp_mcp.skills import diagnose
from wp_mcp.skills.job_scope import job_processes, scope_to_job, spare_pids, without_process
from wp_mcp.skills.report import Evidence

from .builders import loader, process, tcp_ranks, thread, two_node_host


def host_with_a_job_and_neighbours():
    """A job (launcher 100, ranks 200/201 pinned to CPUs 4-5, a loader 300 under rank 0), a
    hog pinned onto the ranks' CPUs (500), an unrelated process waiting for CPUs (900), and
    the host's CPU saturated."""
    graph = two_node_host(cpu_busy_pct=97.0)
    tcp_ranks(graph, cpus_allowed="4-5", cpu_pct=60.0)
    loader(graph, 300, parent=200, cpu_pct=5.0)
    process(graph, 500, name="stress", cpu_pct=99.0, cpus_allowed="5")
    process(graph, 900, name="wp-mcp", cpu_pct=30.0)
    thread(graph, 900, 900, cpu_pct=30.0, run_delay_pct=40.0)
    return graph


def subjects(report) -> set[str]:
    return {f.subject for f in report.findings}


def test_the_job_of_a_rank_or_a_loader_is_its_whole_rank_group():
    graph = host_with_a_job_and_neighbours()
    job = {"proc:100", "proc:200", "proc:201", "proc:300"}
    assert job_processes(graph, 300) == job == job_processes(graph, 201)


def test_a_process_in_no_rank_group_is_its_own_tree():
    graph = host_with_a_job_and_neighbours()
    assert job_processes(graph, 900) == {"proc:900"}


def test_the_scoped_report_keeps_the_job_the_host_and_outside_load_on_the_job():
    graph = host_with_a_job_and_neighbours()
    whole = diagnose(graph)
    assert {"thr:900", "proc:500", "host"} <= subjects(whole)
    scoped = scope_to_job(whole, graph, 300)
    assert "thr:900" not in subjects(scoped)  # a process outside the job, waiting for CPUs
    assert "host" in subjects(scoped)  # the host's saturated CPU bears on the job
    assert "proc:500" in subjects(scoped)  # the hog sits on the ranks' CPUs: outside load
    assert scoped.notes[0].startswith("scoped to the job of proc:300: 4 processes;")
    kept = {f.id for f in scoped.findings}
    for section in scoped.sections:
        assert set(section.finding_ids) <= kept


def test_the_collecting_process_is_never_a_finding_of_its_own_live_diagnosis():
    """wp-mcp is busy during its own window: its threads' run-queue delay is no finding."""
    graph = host_with_a_job_and_neighbours()
    whole = diagnose(graph)
    mine = without_process(whole, graph, 900)
    assert "thr:900" in subjects(whole) and "thr:900" not in subjects(mine)
    assert subjects(whole) - subjects(mine) == {"thr:900"}


def test_a_pid_not_in_the_snapshot_is_one_clear_error():
    with pytest.raises(UserError, match="no process 4242 in this snapshot"):
        job_processes(host_with_a_job_and_neighbours(), 4242)


@pytest.mark.slow
def test_diagnose_live_job_reports_only_that_process_tree(store_dir, capsys):
    """A real parent with a child: the live report names that tree as the job, and no finding
    is about a process outside it unless it is host-wide or names the job."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"  # noqa: E501
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        for _ in range(100):  # until the child exists
            children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if children:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert main(["diagnose", "--live", "--job", str(parent.pid), "--duration", "0.5",
                     "--format", "json"]) == 0  # fmt: skip
    finally:
        for pid in map(int, children):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()
    report = json.loads(capsys.readouterr().out)
    job = report["data"]["job"]
    assert job == sorted([f"proc:{parent.pid}", *(f"proc:{c}" for c in children)])
    assert report["title"].endswith(f", job of proc:{parent.pid}")
    assert report["notes"][0].startswith(f"scoped to the job of proc:{parent.pid}: 2 processes")
    own = f"proc:{os.getpid()}"  # the process running wp-mcp (pytest) is not part of the job
    assert not any(own == f["subject"] for f in report["findings"])


def test_diagnose_job_of_a_missing_process_is_refused_before_collecting(store_dir, capsys):
    assert main(["diagnose", "--live", "--job", "999999999"]) == 2
    assert "--job 999999999: no such process" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "spared"),
    [
        ("renice -n 19 -p 200 500", "renice -n 19 -p 500"),
        ("renice -n 19 -p 200 201", None),
        ("kill -STOP 300  # no CPU is free of ranks on this host", None),
        ("kill 201", None),
        ("ionice -c 3 -p 200", None),
        ("kill -CONT 201", "kill -CONT 201"),  # resuming a stopped rank is a fix
        ("taskset -a -c -p 0-3 200 && migratepages 200 all 0", None),
        ("renice -n 19 -p 500", "renice -n 19 -p 500"),  # not the job's
        (
            "renice -n 19 -p 500 200 && taskset -c -p 2 500",
            "renice -n 19 -p 500 && taskset -c -p 2 500",
        ),
    ],
)
def test_commands_lose_the_pids_of_the_job_they_would_stop_or_renice(command, spared):
    expected = command if spared is None and command.startswith("taskset") else spared
    assert spare_pids(command, {200, 201, 300}) == expected


def test_a_job_report_never_advises_stopping_or_renicing_the_job():
    """Another job (ranks 600/601) slowed by this one is told to renice it; this job's own
    front-end-like hog finding says kill -STOP: scoped to this job, neither command is left."""
    graph = host_with_a_job_and_neighbours()
    report = diagnose(graph)
    other = replace(report.findings[0], id="other", subject="proc:600", command="renice -n 19 -p 200 201",
                    evidence=[Evidence("aggregate", ["proc:200"], {})])  # fmt: skip
    own = replace(report.findings[0], id="own", subject="proc:300", command="kill -STOP 300  # why",
                  action="Stop it.")  # fmt: skip
    report = replace(report, findings=[*report.findings, other, own])
    scoped = scope_to_job(report, graph, 300)
    by_id = {f.id: f for f in scoped.findings}
    assert "other" not in by_id
    assert by_id["own"].command is None and "left out" in by_id["own"].action
    job_pids = {100, 200, 201, 300}
    assert all(spare_pids(f.command, job_pids) == f.command for f in scoped.findings if f.command)
