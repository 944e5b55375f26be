"""Run-queue latency, off-CPU time and who woke whom per thread, from
``sched:sched_wakeup``, ``sched:sched_wakeup_new`` and ``sched:sched_switch``.

A thread becomes runnable when woken (or when preempted while still runnable); the time
until it is switched in is run-queue latency: it wanted a CPU and had none. The time
between being switched out and switched in, minus that wait, is off-CPU time proper
(sleeping, blocked on I/O or a lock).

Who woke whom: when a sleeping thread is woken, the task running the wakeup is its waker
(the writer of the pipe it read, the thread that released the lock it waited on, the sender
of the bytes it received — or, for wakeups from an interrupt, whatever task the interrupt
landed on). The time the thread slept until then is counted for that (waker, wakee) pair:
each thread gets ``ebpf_woken_by``, its wakers by the time it slept before each woke it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .common import comm_of, ensure_thread, tgid_of
from .program import SOURCE, Program, Scope

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

C_TEXT = r"""
/* sched_switch reports a preempted task as TASK_REPORT_MAX (0x100) and a task that
   yielded as 0: both are still runnable. Any bit in the low byte means it went to sleep. */
#define TASK_SLEEP_MASK 0xff

struct thread_val_t {
    u64 runq_ns;
    u64 runq_max_ns;
    u64 runq_waits;
    u64 off_cpu_ns;
    u64 switches_in;
    u64 preempted;
    u64 runnable_since;  /* 0 unless waiting for a CPU */
    u64 off_since;       /* 0 unless off the CPU */
    u32 tgid;
    u32 pad;
    char comm[16];
};
/* One entry per thread holds both its figures and its pending timestamps, so a context
   switch costs two lookups and no map updates (this runs on every switch, on every CPU). */
BPF_HASH(threads, u32, struct thread_val_t, THREAD_MAX_ENTRIES);

struct wake_key_t {
    u32 waker;
    u32 wakee;
};
struct wake_val_t {
    u64 slept_ns;  /* how long the wakee slept before this waker woke it, summed */
    u64 wakeups;
};
BPF_HASH(wakers, struct wake_key_t, struct wake_val_t, WAKE_MAX_ENTRIES);

/* A sleeping thread woken by the current task: count the sleep for that pair. */
static __always_inline void count_waker(u32 wakee, struct thread_val_t *val, u64 now)
{
    if (!val->off_since || val->runnable_since)
        return;  /* not seen going to sleep, or preempted (already runnable) */
    struct wake_key_t key = {.waker = (u32)bpf_get_current_pid_tgid(), .wakee = wakee};
    struct wake_val_t zero = {}, *pair = wakers.lookup_or_try_init(&key, &zero);
    if (!pair) {
        count_lost(PROGRAM_RUNQLAT);
        return;
    }
    pair->slept_ns += now - val->off_since;
    pair->wakeups++;
}

static __always_inline struct thread_val_t *thread_stats(u32 tid)
{
    struct thread_val_t *val = threads.lookup(&tid);
    if (val)
        return val;
    struct thread_val_t zero = {};
    if (threads.update(&tid, &zero) < 0) {
        count_lost(PROGRAM_RUNQLAT);
        return NULL;
    }
    return threads.lookup(&tid);
}

static __always_inline int mark_runnable(u32 tid, int woken)
{
    if (!tid)
        return 0;  /* the idle task */
    struct thread_val_t *val = thread_stats(tid);
    if (!val)
        return 0;
    u64 now = bpf_ktime_get_ns();
    if (woken)
        count_waker(tid, val, now);
    val->runnable_since = now;
    return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
    return mark_runnable(args->pid, 1);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
    return mark_runnable(args->pid, 0);
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid, next = args->next_pid;
    if (prev) {
        struct thread_val_t *val = thread_stats(prev);
        if (val) {
            if (!val->tgid) {  /* the current task is still prev: its tgid and comm */
                val->tgid = bpf_get_current_pid_tgid() >> 32;
                bpf_get_current_comm(&val->comm, sizeof(val->comm));
            }
            if (!(args->prev_state & TASK_SLEEP_MASK)) {
                val->preempted++;
                val->runnable_since = now;
            }
            val->off_since = now;
        }
    }
    if (!next)
        return 0;
    struct thread_val_t *val = thread_stats(next);
    if (!val)
        return 0;
    val->switches_in++;
    u64 waited = 0;
    if (val->runnable_since) {
        waited = now - val->runnable_since;
        val->runq_ns += waited;
        val->runq_waits++;
        if (waited > val->runq_max_ns)
            val->runq_max_ns = waited;
        val->runnable_since = 0;
    }
    if (val->off_since) {
        u64 away = now - val->off_since;
        val->off_cpu_ns += away > waited ? away - waited : 0;
        val->off_since = 0;
    }
    return 0;
}
"""

NS_PER_MS = 1e6


@dataclass
class ThreadRecord:
    tid: int
    tgid: int  # 0 when the thread was never switched out during the window
    comm: str
    runq_ns: int
    runq_max_ns: int
    runq_waits: int
    off_cpu_ns: int
    switches_in: int
    preempted: int


@dataclass
class Wakers:
    """The threads' records and, per woken thread, its wakers: tid → {waker tid: slept ns}."""

    threads: list[ThreadRecord]
    woken_by: dict[int, dict[int, int]]


WAKERS_KEPT = 5  # per thread, its wakers by the sleep they ended, the longest first


def read(bpf: Any) -> Wakers:
    woken_by: dict[int, dict[int, int]] = {}
    for key, val in bpf[b"wakers"].items():
        if key.waker != key.wakee:
            woken_by.setdefault(key.wakee, {})[key.waker] = val.slept_ns
    return Wakers(_threads(bpf), woken_by)


def _threads(bpf: Any) -> list[ThreadRecord]:
    return [
        ThreadRecord(
            tid=tid.value,
            tgid=val.tgid,
            comm=comm_of(bytes(val.comm)),
            runq_ns=val.runq_ns,
            runq_max_ns=val.runq_max_ns,
            runq_waits=val.runq_waits,
            off_cpu_ns=val.off_cpu_ns,
            switches_in=val.switches_in,
            preempted=val.preempted,
        )
        for tid, val in bpf[b"threads"].items()
    ]


def merge(graph: Graph, found: Wakers, scope: Scope) -> None:
    window_ms = scope.window_s * 1000
    for record in found.threads:
        # a thread that ran all through the window was never seen leaving the CPU
        tgid = record.tgid or tgid_of(record.tid)
        if not tgid or not scope.includes(graph, tgid):
            continue
        thread_id = ensure_thread(graph, record.tid, tgid, record.comm)
        node = graph.nodes[thread_id]
        run_delay_ms = record.runq_ns / NS_PER_MS
        values = {
            "ebpf_run_delay_ms": round(run_delay_ms, 3),
            "ebpf_run_delay_max_ms": round(record.runq_max_ns / NS_PER_MS, 3),
            "ebpf_run_delay_pct": round(min(100.0, 100 * run_delay_ms / window_ms), 2),
            "ebpf_runq_waits": record.runq_waits,
            "ebpf_off_cpu_ms": round(record.off_cpu_ns / NS_PER_MS, 3),
            "ebpf_switches_in": record.switches_in,
            "ebpf_preempted": record.preempted,
        }
        for name, value in values.items():
            node.set(name, value, SOURCE)
        wakers = found.woken_by.get(record.tid)
        if wakers:
            longest = sorted(wakers.items(), key=lambda item: -item[1])[:WAKERS_KEPT]
            node.set("ebpf_woken_by", {ids.thread(tid): round(ns / NS_PER_MS, 3)
                                       for tid, ns in longest}, SOURCE)  # fmt: skip


PROGRAM = Program(
    name="runqlat",
    index=2,
    tracepoints=(
        ("sched", "sched_wakeup"),
        ("sched", "sched_wakeup_new"),
        ("sched", "sched_switch"),
    ),
    c_text=C_TEXT,
    read=read,
    merge=merge,
    limits={"THREAD_MAX_ENTRIES": 16384, "WAKE_MAX_ENTRIES": 16384},
)
