"""How the fault suite scores a diagnosis (benchmarks/faults/score.py): a fault is found only
by a P0/P1 finding in the right layer about the right process, its fix must fit this host,
and every other P0/P1 finding is false unless it is a listed side effect or about a process
outside the job."""

from __future__ import annotations

from benchmarks.faults.score import Host, Roles, expect, score

RANK0, RANK1, WORKER, HOG, OTHER = 100, 200, 101, 300, 999
ROLES = Roles(
    {"ranks": {RANK0, RANK1}, "rank1": {RANK1}, "workers": {WORKER}, "injector": {HOG},
     "job": {RANK0, RANK1, WORKER}},
    thread_owner={RANK1 + 5: RANK1},
)  # fmt: skip
HOST = Host(cpus=2, numa_nodes=1, ranks=2, workers_per_rank=2)
STOPPED = expect("1,6", "rank1", "L6.rank-stalled")


def finding(rule: str, priority: str = "P0", subject: str = "", action: str = "fix it") -> dict:
    layer = int(rule[1])
    return {"rule_id": rule, "layer": layer, "priority": priority, "subject": subject,
            "title": rule, "evidence": [{"ids": [subject]}], "action": action}  # fmt: skip


def test_a_p0_in_the_right_layer_about_the_right_process_finds_the_fault():
    result = score({"findings": [finding("L6.rank-stalled", subject=f"proc:{RANK1}")]},
                   STOPPED, (), ROLES, HOST)  # fmt: skip
    assert result.found and result.fix_ok and result.false == []


def test_a_thread_of_the_process_counts_as_the_process():
    report = {"findings": [finding("L6.run-queue-delay", subject=f"thr:{RANK1 + 5}")]}
    assert score(report, STOPPED, (), ROLES, HOST).found


def test_the_right_layer_about_another_process_is_not_found_and_is_false():
    result = score({"findings": [finding("L6.rank-stalled", subject=f"proc:{RANK0}")]},
                   STOPPED, (), ROLES, HOST)  # fmt: skip
    assert not result.found and result.layer_ok and not result.process_ok
    assert result.false == [f"P0 L6.rank-stalled proc:{RANK0}"]


def test_a_p2_finding_neither_finds_nor_counts_as_false():
    report = {"findings": [finding("L6.rank-stalled", "P2", subject=f"proc:{RANK1}")]}
    result = score(report, STOPPED, (), ROLES, HOST)
    assert not result.found and result.false == []


def test_side_effects_are_not_false_and_other_peoples_processes_are_outside():
    report = {"findings": [finding("L1.cpu-saturation", "P1", subject="host"),
                           finding("L6.run-queue-delay", "P1", subject=f"thr:{OTHER}")]}  # fmt: skip
    result = score(report, STOPPED, (expect("1", "host"),), ROLES, HOST)
    assert result.false == [] and result.outside == [f"P1 L6.run-queue-delay thr:{OTHER}"]


def test_on_a_healthy_run_every_p0_p1_about_the_job_or_host_is_false():
    report = {"findings": [finding("L1.cpu-saturation", "P1", subject="host")]}
    assert score(report, None, (), ROLES, HOST).false == ["P1 L1.cpu-saturation host"]


def test_numa_advice_on_a_one_node_host_is_a_wrong_fix():
    report = {"findings": [finding("L6.rank-stalled", subject=f"proc:{RANK1}",
                                   action="bind it with numactl --cpunodebind=1")]}  # fmt: skip
    result = score(report, STOPPED, (), ROLES, HOST)
    assert result.found and not result.fix_ok
    assert result.fix_problems == ["NUMA advice on a one-node host"]


def test_more_loader_workers_than_cpus_is_a_wrong_fix():
    starved = expect("7", "ranks,workers")
    for action in ("raise num_workers and prefetch_factor", "set num_workers=4"):
        report = {"findings": [finding("L7.dataloader-stalled", subject=f"proc:{RANK0}",
                                       action=action)]}  # fmt: skip
        result = score(report, starved, (), ROLES, HOST)
        assert result.found and not result.fix_ok, action


def test_a_hog_is_found_only_when_blamed_for_the_job_not_when_it_waits_itself():
    hog = expect("1,6", "injector", victims="job")
    waits = {"findings": [finding("L6.run-queue-delay", subject=f"thr:{HOG}")]}
    assert not score(waits, hog, (), ROLES, HOST).found
    blamed = finding("L6.cpu-hog-on-rank-cpus", subject=f"proc:{RANK0}")
    blamed["evidence"].append({"ids": [f"proc:{HOG}"]})
    assert score({"findings": [blamed]}, hog, (), ROLES, HOST).found


def test_cpu_time_the_hypervisor_took_is_outside_not_false():
    """Steal is other tenants' work on a shared VM: on a healthy run it is counted apart,
    like other people's processes, while anything else about the host is still false."""
    report = {"findings": [finding("L1.cpu-steal", subject="host"),
                           finding("L1.cpu-saturation", subject="host")]}  # fmt: skip
    result = score(report, None, (), ROLES, HOST)
    assert result.outside == ["P0 L1.cpu-steal host"]
    assert result.false == ["P0 L1.cpu-saturation host"]
