"""Live: real processes whose time goes to waiting on something else, collected by the real
orchestrator and diagnosed — the finding names the end of the wait-for chain, never the
thread that waits.

- a serving front end whose one preprocessing thread is saturated: its model workers wait
  on their request pipes for it;
- a program whose busy Python thread starves its own main thread (the GIL).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.skills import diagnose

pytestmark = pytest.mark.slow

FRONT_END = r"""
import json, os, subprocess, sys, threading, time
WORKER = '''
import os, sys, time
while True:
    item = os.read(0, 64)  # a request, from the front end
    if not item:
        break
    end = time.thread_time() + 0.002
    while time.thread_time() < end:
        pass
'''
workers = [subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE)
           for _ in range(2)]

def preprocess():  # the one stage every request goes through: 20 ms of Python each
    n = 0
    while True:
        end = time.thread_time() + 0.020
        while time.thread_time() < end:
            sum(range(100))
        workers[n % 2].stdin.write(b"request\n")
        workers[n % 2].stdin.flush()
        n += 1

stage = threading.Thread(target=preprocess, daemon=True)
stage.start()
time.sleep(0.3)
print(json.dumps({"stage": stage.native_id, "workers": [w.pid for w in workers]}), flush=True)
sys.stdin.read()
for w in workers:
    w.kill()
"""

STARVED = r"""
import json, sys, threading, time
def busy():
    while True:
        sum(i * i for i in range(10_000))

thread = threading.Thread(target=busy, daemon=True)
thread.start()
print(json.dumps({"busy": thread.native_id}), flush=True)
while True:  # the main thread's own steps: short Python work, each needing the GIL
    for _ in range(200):
        sum(range(50))
    time.sleep(0.001)
"""


def run_and_diagnose(code: str):
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        hello = json.loads(proc.stdout.readline())
        graph = collect_snapshot(Context(window_s=2.0, pids={proc.pid}, ebpf="off"))
        return proc.pid, hello, graph, diagnose(graph)
    finally:
        proc.kill()
        proc.wait()


def chains(report):
    return [f for f in report.findings if f.rule_id == "L6.wait-chain"]


def test_workers_waiting_on_a_saturated_preprocessing_stage_name_that_stage():
    pid, hello, graph, report = run_and_diagnose(FRONT_END)
    for worker in hello["workers"]:
        shares = graph.node(f"thr:{worker}").get("time_shares")
        assert shares.get("pipe_read", 0) >= 0.2, shares  # waiting for requests
    found = [f for f in chains(report) if f.subject == f"thr:{hello['stage']}"]
    assert found, [(f.id, f.title) for f in chains(report)]
    (finding,) = found
    assert finding.priority in ("P0", "P1")
    assert f"proc:{pid}" in finding.title and "reading the empty pipe" in finding.title
    victims = {i for ev in finding.evidence for i in ev.ids}
    assert {f"thr:{w}" for w in hello["workers"]} & victims
    assert all(f.subject not in {f"proc:{w}" for w in hello["workers"]} for f in chains(report))


def test_a_busy_thread_starving_its_own_main_thread_is_named_with_a_fix_for_the_gil():
    pid, hello, graph, report = run_and_diagnose(STARVED)
    shares = graph.node(f"thr:{pid}").get("time_shares")
    assert shares.get("futex", 0) >= 0.2, shares  # the main thread waits for the GIL
    (finding,) = [f for f in chains(report) if f.subject == f"thr:{hello['busy']}"]
    assert finding.priority in ("P0", "P1")
    assert "GIL" in finding.action and "pinning" in finding.action
    hot = [f for f in report.findings if f.id == f"HT.hot-thread@thr:{hello['busy']}"]
    assert all("NUMA" not in f.action and "L6.wait-chain" in f.action for f in hot)
