"""Pipe and FIFO bytes per (process, pipe, direction), from the ``read``/``write`` syscall
tracepoints.

Polling sees who holds which end of a pipe but no byte counters (the kernel keeps none),
so the ipc collector's pipe links say ``measured: false``. Here ``sys_enter_read``/
``sys_enter_write`` look up the fd in the calling task's file table (offsets from BTF) and
remember the call when the file is a FIFO; ``sys_exit_read``/``sys_exit_write`` add the
byte count the call returned. ``readv``/``writev``/``splice`` are not traced.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .common import add_counter, comm_of, ensure_process, link_flow
from .program import SOURCE, Program, Scope

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

C_TEXT = r"""
#define MODE_TYPE_MASK 0170000
#define MODE_FIFO 0010000

struct pipe_call_t {
    u64 ino;
    u32 writing;
    u32 pad;
};
struct pipe_key_t {
    u64 ino;
    u32 tgid;
    u32 pad;
};
struct pipe_val_t {
    u64 written;
    u64 read;
    u64 writes;
    u64 reads;
    char comm[16];
};
/* in-flight calls are LRU: a thread that exits inside read() is evicted, not leaked */
BPF_TABLE("lru_hash", u32, struct pipe_call_t, pipe_calls, PIPE_CALL_ENTRIES);
BPF_HASH(pipe_bytes, struct pipe_key_t, struct pipe_val_t, PIPE_MAX_ENTRIES);

/* Inode number of the FIFO behind the current task's fd, 0 when it is anything else. */
static __always_inline u64 fifo_inode(u64 fd)
{
    void *task = (void *)bpf_get_current_task();
    void *files = NULL, *fdt = NULL, *fd_array = NULL, *file = NULL, *inode = NULL;
    unsigned int max_fds = 0;
    u16 mode = 0;
    u64 ino = 0;
    bpf_probe_read_kernel(&files, sizeof(files), (char *)task + OFF_TASK_FILES);
    if (!files)
        return 0;
    bpf_probe_read_kernel(&fdt, sizeof(fdt), (char *)files + OFF_FILES_FDT);
    if (!fdt)
        return 0;
    bpf_probe_read_kernel(&max_fds, sizeof(max_fds), (char *)fdt + OFF_FDTABLE_MAX_FDS);
    if (fd >= max_fds)
        return 0;
    bpf_probe_read_kernel(&fd_array, sizeof(fd_array), (char *)fdt + OFF_FDTABLE_FD);
    if (!fd_array)
        return 0;
    bpf_probe_read_kernel(&file, sizeof(file), (char *)fd_array + fd * sizeof(void *));
    if (!file)
        return 0;
    bpf_probe_read_kernel(&inode, sizeof(inode), (char *)file + OFF_FILE_F_INODE);
    if (!inode)
        return 0;
    bpf_probe_read_kernel(&mode, sizeof(mode), (char *)inode + OFF_INODE_I_MODE);
    if ((mode & MODE_TYPE_MASK) != MODE_FIFO)
        return 0;
    bpf_probe_read_kernel(&ino, sizeof(ino), (char *)inode + OFF_INODE_I_INO);
    return ino;
}

static __always_inline int enter_pipe_call(u64 fd, u32 writing)
{
    u64 ino = fifo_inode(fd);
    if (!ino)
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pipe_call_t call = {.ino = ino, .writing = writing};
    if (pipe_calls.update(&tid, &call) < 0)
        count_lost(PROGRAM_PIPES);
    return 0;
}

static __always_inline int exit_pipe_call(long ret)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    struct pipe_call_t *call = pipe_calls.lookup(&tid);
    if (!call)
        return 0;
    struct pipe_key_t key = {.ino = call->ino, .tgid = pid_tgid >> 32};
    u32 writing = call->writing;
    pipe_calls.delete(&tid);
    if (ret <= 0)
        return 0;
    struct pipe_val_t *val = pipe_bytes.lookup(&key);
    if (!val) {
        struct pipe_val_t zero = {};
        bpf_get_current_comm(&zero.comm, sizeof(zero.comm));
        if (pipe_bytes.update(&key, &zero) < 0) {
            count_lost(PROGRAM_PIPES);
            return 0;
        }
        val = pipe_bytes.lookup(&key);
        if (!val)
            return 0;
    }
    if (writing) {
        __sync_fetch_and_add(&val->written, ret);
        __sync_fetch_and_add(&val->writes, 1);
    } else {
        __sync_fetch_and_add(&val->read, ret);
        __sync_fetch_and_add(&val->reads, 1);
    }
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_write)
{
    return enter_pipe_call(args->fd, 1);
}

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{
    return enter_pipe_call(args->fd, 0);
}

TRACEPOINT_PROBE(syscalls, sys_exit_write)
{
    return exit_pipe_call(args->ret);
}

TRACEPOINT_PROBE(syscalls, sys_exit_read)
{
    return exit_pipe_call(args->ret);
}
"""


@dataclass
class PipeRecord:
    """What eBPF saw of one pipe: per pid [written, read, writes, reads]."""

    ino: int
    by_pid: dict[int, list[int]] = field(default_factory=dict)
    comms: dict[int, str] = field(default_factory=dict)


def read(bpf: Any) -> list[PipeRecord]:
    records: dict[int, PipeRecord] = {}
    for key, val in bpf[b"pipe_bytes"].items():
        record = records.setdefault(key.ino, PipeRecord(key.ino))
        record.by_pid[key.tgid] = [val.written, val.read, val.writes, val.reads]
        record.comms[key.tgid] = comm_of(bytes(val.comm))
    return list(records.values())


def merge(graph: Graph, records: list[PipeRecord], scope: Scope) -> None:
    for record in records:
        pids = [pid for pid in record.by_pid if scope.includes(graph, pid)]
        if not pids:
            continue
        pipe_id = ids.pipe(record.ino)
        if pipe_id not in graph:
            graph.add("pipe", pipe_id, source=SOURCE, inode=record.ino)
        node = graph.nodes[pipe_id]
        node.set("ebpf_bytes_written", sum(record.by_pid[p][0] for p in pids), SOURCE)
        node.set("ebpf_bytes_read", sum(record.by_pid[p][1] for p in pids), SOURCE)
        for pid in pids:
            written, read_bytes, _, _ = record.by_pid[pid]
            proc_id = ensure_process(graph, pid, record.comms.get(pid, ""))
            add_counter(graph, proc_id, "ebpf_pipe_bytes_written", written)
            add_counter(graph, proc_id, "ebpf_pipe_bytes_read", read_bytes)
            if not any(e.dst == pipe_id for e in graph.out_edges(proc_id, "holds")):
                graph.link("holds", proc_id, pipe_id, source=SOURCE)
        _link_writers_to_readers(graph, record, pids, scope.window_s)


def _link_writers_to_readers(
    graph: Graph, record: PipeRecord, pids: list[int], window_s: float
) -> None:
    """Each writer's bytes go to the readers in proportion to what each of them read
    (exact for the usual one writer, one reader)."""
    readers = {pid: record.by_pid[pid][1] for pid in pids if record.by_pid[pid][1]}
    total_read = sum(readers.values())
    shares: dict[tuple[str, str], int] = defaultdict(int)
    for writer in pids:
        written = record.by_pid[writer][0]
        for reader, read_bytes in readers.items():
            if written and reader != writer:
                shares[(ids.process(writer), ids.process(reader))] += round(
                    written * read_bytes / total_read
                )
    for (src, dst), sent in shares.items():
        link_flow(graph, src, dst, "pipe", sent, 1, window_s)


PROGRAM = Program(
    name="pipes",
    index=4,
    tracepoints=(
        ("syscalls", "sys_enter_write"),
        ("syscalls", "sys_enter_read"),
        ("syscalls", "sys_exit_write"),
        ("syscalls", "sys_exit_read"),
    ),
    c_text=C_TEXT,
    read=read,
    merge=merge,
    limits={"PIPE_CALL_ENTRIES": 16384, "PIPE_MAX_ENTRIES": 16384},
)
