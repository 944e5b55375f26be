"""Block I/O latency per process, from ``block:block_io_start`` and ``block:block_io_done``.

``block_io_start`` fires when a bio enters the block layer, in the context of the task
that submitted it (for buffered writes that is the kernel's flusher, not the writer — the
per-process figures say who waited on the device); ``block_io_done`` fires when it
completes. The pair is matched by device and sector. Kernels before 6.5 lack these two
tracepoints: the program is then left out and the collector says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .common import comm_of, ensure_process
from .program import SOURCE, Program, Scope

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

C_TEXT = r"""
struct bio_key_t {
    u64 sector;
    u32 dev;
    u32 pad;
};
struct bio_start_t {
    u64 ts;
    u32 tgid;
    u32 bytes;  /* at completion the bio's size has been consumed: keep it from the start */
    u32 write;
    u32 pad;
    char comm[16];
};
struct blk_val_t {
    u64 ios;
    u64 bytes;
    u64 lat_ns;
    u64 max_ns;
    u64 write_ios;
    u64 write_bytes;
    char comm[16];
};
/* in-flight state is LRU: a bio whose completion we never see is evicted, not leaked */
BPF_TABLE("lru_hash", struct bio_key_t, struct bio_start_t, bio_inflight, BIO_INFLIGHT_ENTRIES);
BPF_HASH(blk_by_pid, u32, struct blk_val_t, BLK_PID_ENTRIES);

TRACEPOINT_PROBE(block, block_io_start)
{
    struct bio_key_t key = {.sector = args->sector, .dev = args->dev};
    struct bio_start_t start = {.ts = bpf_ktime_get_ns(),
                                .tgid = bpf_get_current_pid_tgid() >> 32,
                                .bytes = args->bytes,
                                .write = args->rwbs[0] == 'W' || args->rwbs[1] == 'W'};
    bpf_get_current_comm(&start.comm, sizeof(start.comm));
    if (bio_inflight.update(&key, &start) < 0)
        count_lost(PROGRAM_BLOCKIO);
    return 0;
}

TRACEPOINT_PROBE(block, block_io_done)
{
    struct bio_key_t key = {.sector = args->sector, .dev = args->dev};
    struct bio_start_t *start = bio_inflight.lookup(&key);
    if (!start)
        return 0;  /* started before the window */
    u64 took = bpf_ktime_get_ns() - start->ts;
    u32 tgid = start->tgid;
    u32 write = start->write;
    u64 bytes = start->bytes;
    struct blk_val_t zero = {};
    __builtin_memcpy(zero.comm, start->comm, sizeof(zero.comm));
    bio_inflight.delete(&key);
    struct blk_val_t *val = blk_by_pid.lookup(&tgid);
    if (!val) {
        if (blk_by_pid.update(&tgid, &zero) < 0) {
            count_lost(PROGRAM_BLOCKIO);
            return 0;
        }
        val = blk_by_pid.lookup(&tgid);
        if (!val)
            return 0;
    }
    __sync_fetch_and_add(&val->ios, 1);
    __sync_fetch_and_add(&val->bytes, bytes);
    __sync_fetch_and_add(&val->lat_ns, took);
    if (took > val->max_ns)
        val->max_ns = took;
    if (write) {
        __sync_fetch_and_add(&val->write_ios, 1);
        __sync_fetch_and_add(&val->write_bytes, bytes);
    }
    return 0;
}
"""


@dataclass
class BlockRecord:
    pid: int
    comm: str
    ios: int
    bytes: int
    lat_ns: int
    max_ns: int
    write_ios: int
    write_bytes: int


def read(bpf: Any) -> list[BlockRecord]:
    return [
        BlockRecord(
            pid.value,
            comm_of(bytes(v.comm)),
            v.ios,
            v.bytes,
            v.lat_ns,
            v.max_ns,
            v.write_ios,
            v.write_bytes,
        )
        for pid, v in bpf[b"blk_by_pid"].items()
    ]


def merge(graph: Graph, records: list[BlockRecord], scope: Scope) -> None:
    for record in records:
        if not record.pid or not record.ios or not scope.includes(graph, record.pid):
            continue
        proc_id = ensure_process(graph, record.pid, record.comm)
        node = graph.nodes[proc_id]
        values = {
            "ebpf_block_ios": record.ios,
            "ebpf_block_bytes": record.bytes,
            "ebpf_block_write_ios": record.write_ios,
            "ebpf_block_write_bytes": record.write_bytes,
            "ebpf_block_lat_avg_ms": round(record.lat_ns / record.ios / 1e6, 3),
            "ebpf_block_lat_max_ms": round(record.max_ns / 1e6, 3),
        }
        for name, value in values.items():
            node.set(name, value, SOURCE)


PROGRAM = Program(
    name="blockio",
    index=3,
    tracepoints=(("block", "block_io_start"), ("block", "block_io_done")),
    c_text=C_TEXT,
    read=read,
    merge=merge,
    limits={"BIO_INFLIGHT_ENTRIES": 4096, "BLK_PID_ENTRIES": 4096},
)
