"""The job-progress rule on small graphs: a rank stopped, blocked or silent while its peers
wait is a P0 naming the rank and how long; a healthy job and idle processes that are not
ranks are left alone. (The live counterpart, a real gloo job with a rank SIGSTOPped, is in
test_job_live.py.)"""

from __future__ import annotations

from wp_mcp.graph import Graph
from wp_mcp.skills import diagnose
from wp_mcp.skills.bottleneck_identification import evaluate
from wp_mcp.skills.thresholds import Limit, graded

from .builders import GIB, loader, process, tcp_ranks, thread, two_node_host

RULE = "L6.rank-stalled"
MIB = 1 << 20


def job(states=("S", "S"), cpu=(30.0, 30.0), rate=40 * MIB, lifetime=800 * MIB, **thread_attrs):
    """Two ranks of one launcher whose ring links carried ``rate`` B/s over a 5 s window."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        for index, rank in enumerate(ranks):
            node = graph.nodes[rank]
            node.state, node.cpu_pct, node.window_s = states[index], cpu[index], 5.0
            thread(graph, 200 + index, 200 + index, state=states[index], cpu_pct=cpu[index],
                   run_delay_pct=0.0, **thread_attrs)  # fmt: skip
        for edge in graph.edges("talks_to"):
            edge.bytes_per_s, edge.bytes, edge.window_s = rate, lifetime, 5.0
        return graph

    return build


def findings(graph):
    result = next(o.result for o in evaluate(graph) if o.rule.id == RULE)
    assert not isinstance(result, str), result
    return result


def test_a_stopped_rank_whose_peer_waits_is_p0_naming_it_and_how_long():
    (finding,) = findings(job(states=("S", "T"), cpu=(0.2, 0.0), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:201"
    assert "stopped (state T)" in finding.title
    assert "whole 5.0 s window" in finding.title and "1 peer wait" in finding.title
    assert finding.command == "kill -CONT 201"


def test_a_rank_blocked_in_d_state_while_its_peer_waits_is_p0():
    (finding,) = findings(job(states=("S", "D"), cpu=(0.3, 0.5), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:201"
    assert "blocked in D state" in finding.title and "thr:201" in finding.title
    assert finding.command == "cat /proc/201/task/201/stack"
    graph = job(states=("S", "D"), cpu=(0.3, 0.5), rate=0.0)()
    graph.nodes["proc:201"].ebpf_block_lat_max_ms = 427.0
    (seen,) = findings(graph)
    assert "off CPU 100 % of the window, block I/O latency up to 427 ms" in seen.title


def test_a_thread_caught_in_d_state_on_a_moving_job_is_no_stall():
    """A rank's thread in D at the window's end (a log write) while the links carried
    40 MiB/s: the job moves; L5.d-state says the thread waits, this rule stays silent."""
    assert findings(job(states=("S", "D"), cpu=(30.0, 0.5))()) == []


def test_a_rank_stopped_for_the_whole_window_is_p0_despite_bytes_its_peer_pushed_in():
    """Stopped before the window (no CPU in it): the kernel still takes what its peer sends
    until the receive buffer fills, so its links show bytes, yet the job waits throughout."""
    (finding,) = findings(job(states=("S", "T"), cpu=(0.3, 0.0), rate=6000.0)())
    assert finding.priority == "P0" and "1 peer wait" in finding.title


def test_a_rank_stopped_only_at_the_windows_end_is_p1():
    """Its links still carried data: the job was moving for most of the window."""
    (finding,) = findings(job(states=("S", "T"), cpu=(20.0, 15.0))())
    assert finding.priority == "P1"


def test_a_job_whose_ranks_all_went_silent_is_one_p0():
    (finding,) = findings(job(cpu=(0.1, 0.2), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:200+proc:201"
    assert "made no progress" in finding.title


def test_a_healthy_job_is_quiet():
    assert findings(job()()) == []


def test_idle_ranks_whose_links_never_carried_data_are_not_a_stall():
    """Two sibling processes at rest on a connection that never moved a MiB (a service
    pair between requests, a job still starting) are not a hang."""
    assert findings(job(cpu=(0.0, 0.0), rate=0.0, lifetime=4096)()) == []


def test_a_stopped_or_blocked_process_that_is_not_a_rank_is_not_judged():
    graph = job()()
    process(graph, 700, name="vim", state="T", cpu_pct=0.0)
    thread(graph, 700, 700, state="T", cpu_pct=0.0)
    process(graph, 701, name="sync", state="D", cpu_pct=0.0)
    thread(graph, 701, 701, state="D", cpu_pct=0.0, run_delay_pct=0.0)
    assert findings(graph) == []


def stalled_rank(state):
    """For the rule table of test_skills_rules: rank 1 in ``state`` with quiet links, or
    with ``None`` a healthy job."""
    return job(states=("S", state), cpu=(0.2, 0.0), rate=0.0) if state else job()


def test_thresholds_are_written_once_and_read_back_as_text():
    assert str(Limit(90, "%")) == "≥ 90 %" and str(Limit(1, "% of a CPU", below=True)) == (
        "≤ 1 % of a CPU"
    )
    assert Limit(20, "ms").reached(20) and not Limit(20, "ms").reached(19.9)
    assert not Limit(20, "ms").reached(None)
    assert graded(Limit(20, "ms"), Limit(100, "ms"), "P1") == "≥ 20 ms (P1 from 100 ms)"


# --------------------------------------------------------------------------- data loaders

LOADER_RULE = "L7.dataloader-stalled"
HEALTHY_WORKER = {"fd_wait": 0.5, "sleep": 0.4, "running": 0.1}  # half the time idle


def loader_waits(trainer=None, worker=None, worker_cpu=5.0, run_delay=0.0, workers=2, **host):
    """Two ranks with ``workers`` loader workers each on 8 CPUs; ``trainer`` and ``worker``
    are the shares of the window their main threads spent per wait class (waits collector)."""
    trainer = trainer or {"sleep": 0.6, "running": 0.25, "futex": 0.15}
    worker = worker or HEALTHY_WORKER

    def build():
        graph = two_node_host(**host)
        for index, rank in enumerate(tcp_ranks(graph)):
            node = graph.nodes[rank]
            node.cpu_pct, node.main_waits = 10.0, trainer
            thread(graph, 200 + index, 200 + index, cpu_pct=10.0, run_delay_pct=run_delay)
            for w in range(workers):
                pid = 300 + 10 * index + w
                loader(graph, pid, parent=200 + index, cpu_pct=worker_cpu,
                       main_waits=worker)  # fmt: skip
        return graph

    return build


def loader_findings(graph, rule_id=LOADER_RULE):
    result = next(o.result for o in evaluate(graph) if o.rule.id == rule_id)
    assert not isinstance(result, str), result
    return result


ON_QUEUE = {"fd_wait": 0.85, "running": 0.1, "futex": 0.05}


def test_a_trainer_waiting_on_busy_loaders_is_named_with_what_the_loaders_do():
    found = loader_findings(loader_waits(ON_QUEUE, {"sleep": 1.0}, cpu_busy_pct=100.0)())
    assert [f.subject for f in found] == ["proc:200", "proc:201"]
    assert all(f.priority == "P1" for f in found)
    assert "waits on its DataLoader 85 %" in found[0].title
    assert "sleeping inside __getitem__" in found[0].title


def test_a_healthy_job_whose_loaders_keep_up_draws_no_loader_finding():
    """Loaders idle half the time (waiting for the next index) keep ahead of the trainer,
    whatever the trainer waits on."""
    assert loader_findings(loader_waits()()) == []
    assert loader_findings(loader_waits(ON_QUEUE)()) == []


def test_a_rank_waiting_on_its_peers_or_for_a_cpu_is_not_blamed_on_its_loaders():
    """Packet loss or a slow peer: the trainer sleeps in the collective (futex); a CPU hog:
    it waits for a CPU. Busy loaders do not make either a loader problem."""
    on_peers = {"futex": 0.8, "running": 0.2}
    assert loader_findings(loader_waits(on_peers, {"sleep": 1.0})()) == []
    assert loader_findings(loader_waits(ON_QUEUE, {"sleep": 1.0}, run_delay=40.0)()) == []


def test_a_helper_thread_waiting_for_a_cpu_does_not_hide_a_starved_main_thread():
    """On a crowded host the trainer's gloo thread waits for a CPU 40 % of the window; its
    main thread (on the loader queue) only 8 %: the loaders still hold it."""
    graph = loader_waits(ON_QUEUE, {"running": 1.0}, run_delay=8.0)()
    thread(graph, 200, 250, cpu_pct=0.3, run_delay_pct=40.0)
    assert "proc:200" in {f.subject for f in loader_findings(graph)}


def test_loaders_blocked_on_disk_are_sent_to_the_storage_layer():
    (first, _) = loader_findings(loader_waits(ON_QUEUE, {"io": 0.9, "running": 0.1})())
    assert "blocked on disk I/O" in first.title and "layer 5" in first.action


def test_loaders_faulting_pages_in_are_sent_to_memory_not_told_to_change_their_count():
    """Under a cgroup memory.high the workers look busy (running between faults), but they
    read their pages back from disk: the cause is memory, and neither more workers (more
    pages) nor loading in the trainer (num_workers=0) helps."""
    graph = loader_waits(ON_QUEUE, {"running": 0.9, "fd_wait": 0.1}, 90.0, cpu_busy_pct=99.0,
                         workers=4)()  # fmt: skip
    for worker in graph.of_kind("process"):
        if worker.get("name") == "pt_data_worker":
            worker.major_faults_per_s = 240.0
    (first, _) = loader_findings(graph)
    assert "faulting their pages back in from disk (240 major faults/s each)" in first.title
    assert "layer 2" in first.action and "keep the number of loader workers" in first.action
    assert "num_workers from" not in first.action


def test_the_worker_count_advised_fits_the_idle_cpus_of_this_host():
    """8 CPUs for 2 ranks hold 3 workers each with a CPU apiece. 75 % busy leaves 2 idle:
    CPU-bound workers (90 % of one each) fit 1 more per rank. With every CPU busy the count
    stays; with 4 CPU-bound workers per rank (runnable all the time, whatever CPU they got)
    it comes down to the 3 that fit."""
    cpu_bound = {"running": 0.95, "fd_wait": 0.05}
    (free, _) = loader_findings(loader_waits(ON_QUEUE, cpu_bound, 90.0, cpu_busy_pct=75.0)())
    assert "raise num_workers from 2 to 3 per rank" in free.action
    assert "8 CPUs for 2 ranks, 2.0 idle" in free.action
    (full, _) = loader_findings(loader_waits(ON_QUEUE, cpu_bound, 90.0, cpu_busy_pct=99.0)())
    assert "keep the number of loader workers" in full.action and "raise" not in full.action
    crowded = loader_waits(ON_QUEUE, cpu_bound, 15.0, workers=4, cpu_busy_pct=99.0)()
    (fewer, _) = loader_findings(crowded)
    assert "lower num_workers from 4 to 3 per rank" in fewer.action


def test_loader_rule_without_wait_samples_says_what_it_needs():
    graph = loader_waits()()
    for node in graph.of_kind("process"):
        node.main_waits = None
    result = next(o.result for o in evaluate(graph) if o.rule.id == LOADER_RULE)
    assert isinstance(result, str) and "wait samples" in result


def test_oversubscribed_loaders_get_a_count_that_fits_the_cpus():
    graph = loader_waits()()
    for index in range(2):
        for w in range(2, 12):
            loader(graph, 400 + 20 * index + w, parent=200 + index)
    (finding,) = loader_findings(graph, "L7.loader-oversubscribed")
    assert "num_workers=3 per rank" in finding.action  # 2 ranks + 6 workers ≤ 8 CPUs


def stalled_loaders(stalled):
    """For the rule table of test_skills_rules: trainers waiting on busy loaders, or (False)
    a healthy job."""
    return loader_waits(ON_QUEUE, {"sleep": 1.0}) if stalled else loader_waits()


# --------------------------------------------------------------------------- storage

MB = 1_000_000


def busy_disk():
    """A disk busy 99 % of the window; dd writes 600 MB/s, a rank 95 MB/s with 427 ms block
    latency seen by eBPF, a log reader 0.5 MB/s (too little to name)."""
    graph = job()()
    graph.add("disk", "disk:vda", name="vda", util_pct=99.0, await_ms=150.0)
    graph.add("host", "host", cpu_iowait_pct=35.0)
    process(graph, 500, name="dd", io_write_bytes_per_s=600 * MB, io_read_bytes_per_s=0.0)
    graph.nodes["proc:200"].io_write_bytes_per_s = 95 * MB
    graph.nodes["proc:200"].ebpf_block_lat_max_ms = 427.0
    process(graph, 501, name="tail", io_read_bytes_per_s=0.5 * MB)
    return graph


NAMED = "dd (pid 500) writes 600 MB/s; python3 (pid 200, rank) writes 95 MB/s, block latency up to 427 ms"


def test_io_findings_name_the_writers_with_their_rates_and_latency():
    graph = busy_disk()
    for rule_id in ("L5.disk-util", "L5.disk-await", "L5.iowait"):
        (finding,) = loader_findings(graph, rule_id)
        assert finding.title.endswith(NAMED), finding.title
        (named,) = [e for e in finding.evidence if e.kind == "aggregate"]
        assert named.ids == ["proc:500", "proc:200"]
        assert named.values["io_write_bytes_per_s"] == [600 * MB, 95 * MB]


def test_a_blocked_process_says_what_it_reads_or_writes():
    graph = busy_disk()
    thread(graph, 200, 210, state="D")
    (finding,) = loader_findings(graph, "L5.d-state")
    assert finding.title.endswith("in D state: it writes 95 MB/s, block latency up to 427 ms")


# --------------------------------------------------------------------------- one-node hosts


def test_a_one_node_host_gets_no_numa_advice():
    """One NUMA node, 1 GiB of it free and a 20 GiB process: the memory is short, said as
    the host's, and nothing in the diagnosis advises numactl or a node."""
    graph = Graph()
    graph.meta.window_s = 5.0
    graph.add("host", "host", mem_total_bytes=32 * GIB, mem_available_bytes=24 * GIB)
    graph.add("numa_node", "numa:0", numa_id=0, cpulist="0-7", mem_total_bytes=32 * GIB,
              mem_free_bytes=1 * GIB)  # fmt: skip
    process(graph, 300, rss_bytes=20 * GIB, numa_cpu_share={"0": 1.0})
    (short,) = next(o.result for o in evaluate(graph) if o.rule.id == "L2.numa-node-exhausted")
    assert short.title == "Only 1.0 GiB of memory free while proc:300 (python3) holds 20.0 GiB"
    advice = " ".join(f"{f.action} {f.command or ''}" for f in diagnose(graph).findings)
    assert "numactl" not in advice and "NUMA node" not in advice


def test_memory_stalls_name_who_faults_and_who_holds_the_memory():
    """A job's loaders reading pages back while a neighbour holds a gigabyte: the PSI and
    fault findings name both, the loaders as dataloaders of the job."""
    graph = two_node_host(major_faults_per_s=180.0, psi={"memory_some_avg10": 20.0})
    for i, _ in enumerate(tcp_ranks(graph)):
        loader(graph, 300 + i, parent=200 + i, major_faults_per_s=45.0,
                rss_bytes=GIB // 4)  # fmt: skip
    hog = process(graph, 900, name="hog", rss_bytes=GIB, major_faults_per_s=0.0)
    found = [f for o in evaluate(graph) if isinstance(o.result, list) for f in o.result]
    for rule_id in ("L2.psi-memory", "L2.major-faults"):
        (finding,) = [f for f in found if f.rule_id == rule_id]
        assert "faulting pt_data_worker (pid 300, dataloader) 45/s" in finding.title.replace(
            "\\", ""
        )
        assert "biggest resident hog (pid 900) 1.0 GiB" in finding.title
        named = {i for ev in finding.evidence for i in ev.ids}
        assert {"proc:300", "proc:301", hog} <= named
