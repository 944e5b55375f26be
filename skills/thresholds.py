"""Every rule threshold written once: the check compares against it and the text shows it.

A rule module imports its limits from here; ``Limit.reached`` is the check and ``str(limit)``
is the threshold text a finding shows, so the two cannot drift apart. ``graded`` writes the
text of a limit that escalates (``≥ 20 ms (P1 from 100 ms)``). Rules of any layer may add
their limits here; each constant says what it measures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """One threshold: ``value`` with its ``unit``; reached at or above it, or with
    ``below=True`` at or under it (a floor that is a problem when undershot); ``strict``
    leaves the value itself out (``>``, ``<``)."""

    value: float
    unit: str = ""
    below: bool = False
    strict: bool = False

    def reached(self, measured: float | None) -> bool:
        if measured is None:
            return False
        if self.strict:
            return measured < self.value if self.below else measured > self.value
        return measured <= self.value if self.below else measured >= self.value

    def __str__(self) -> str:
        sign = ("<" if self.below else ">") if self.strict else "≤" if self.below else "≥"
        return f"{sign} {self.value:g}{_spaced(self.unit)}"


def _spaced(unit: str) -> str:
    return f" {unit}" if unit and not unit.startswith("×") else unit


def graded(base: Limit, higher: Limit, priority: str) -> str:
    """``≥ 20 ms (P1 from 100 ms)``: the text of a limit whose priority rises at ``higher``
    (its unit's first word only: ``≥ 5 % of periods (P0 from 20 %)``)."""
    unit = higher.unit.split()[0] if higher.unit else ""
    return f"{base} ({priority} from {higher.value:g}{_spaced(unit)})"


# --------------------------------------------------------------------------- layer 1
CPU_BUSY = Limit(90, "%")  # host CPU busy over the window
CPU_STEAL = Limit(5, "%")  # CPU time stolen by the hypervisor (P1)
CPU_STEAL_P0 = Limit(10, "%")
DRIVER_THREAD = Limit(95, "% of one CPU")  # the thread driving an accelerator
ACCELERATOR_IDLE = Limit(30, "%", below=True, strict=True)  # device busy while held
THROTTLED = Limit(5, "% of periods")  # cgroup CPU periods throttled (P1)
THROTTLED_P0 = Limit(20, "% of periods")

# --------------------------------------------------------------------------- layer 2
MEM_AVAILABLE_LOW = Limit(10, "%", below=True, strict=True)  # share of memory available (P1)
MEM_AVAILABLE_P0 = Limit(5, "%", below=True, strict=True)
SWAP_FAULTS_P1 = Limit(10, "major faults/s")  # swap in use becomes P1 with this fault rate
MAJOR_FAULTS = Limit(100, "/s")
PSI_SOME = Limit(10, "%")  # some_avg10: share of the last 10 s some task stalled (cpu, memory, io)
PSI_MEMORY_FULL_P0 = Limit(5, "%")  # full_avg10 of memory: every task stalled at once
NODE_FREE_LOW = Limit(10, "% of the node", below=True, strict=True)  # a NUMA node's free memory
PROC_MAJOR_FAULTS = Limit(10, "major faults/s")  # a process faulting this often is named …
BIG_RESIDENT_NAMED = Limit(256, "MiB")  # … beside the biggest resident sets of this size

# --------------------------------------------------------------------------- layer 5
DISK_UTIL = Limit(90, "%")  # share of the window with I/O in flight (iostat %util)
DISK_AWAIT = Limit(20, "ms")  # average wait per request (P2)
DISK_AWAIT_P1 = Limit(100, "ms")
IOWAIT = Limit(10, "%")  # host CPU time idle waiting for I/O
DISK_QUEUE = Limit(32, "requests")  # average requests in flight
IO_NAMED_RATE = Limit(1 << 20, "B/s")  # a process moving less than this is not named
IO_NAMED_MAX = 4  # how many readers/writers an I/O finding names

# --------------------------------------------------------------------------- layer 6
BUSY_THREAD = Limit(5, "% CPU")  # a thread using less than this loses little by waiting
RUN_DELAY = Limit(10, "% of the window")  # a busy thread outside a rank group waiting (P1)
# A rank is measurably delayed when its busiest waiting thread waited this share of the
# window for a CPU …
RANK_RUN_DELAY = Limit(5, "% of the window")
# … and this share of the time it wanted one (running + runnable): a job that fills its own
# CPUs waits a little; one that is crowded out waits a large part of its run time.
RANK_DELAY_SHARE = Limit(25, "% of its CPU demand")
# Processes outside the job using this much CPU together are the cause of the ranks' wait …
OUTSIDE_LOAD = Limit(50, "% of a CPU")
NEIGHBOUR_CPU = Limit(5, "% of a CPU")  # … and each one using this much is named
# The job's cgroup held off its CPUs by its quota this share of the window (cpu.max)
JOB_THROTTLED = Limit(5, "% of the window throttled")
# A process pinned onto the ranks' CPUs running or runnable there this much (L6.cpu-hog)
HOG_DEMAND = Limit(10, "% of a CPU")
INVOL_SWITCHES = Limit(100, "/s")  # preemptions of a busy thread …
INVOL_BUSY = Limit(20, "% CPU")  # … using at least this much CPU
LOAD_OVER_CPUS = Limit(1, "× the CPUs", strict=True)  # load1 / CPUs
IMBALANCE = Limit(1.5, "×")  # busiest / least busy rank of a group …
IMBALANCE_BUSY = Limit(20, "% CPU")  # … with the busiest at least this busy
# the wait-for chain (skills/waitfor.py): a victim's share of the window lost on one cause
CHAIN_LOSS = Limit(20, "% of the window")
CHAIN_LOSS_P0 = Limit(50, "% of the window")  # … a rank's or front end's: P0
PEER_WAIT_GAP = Limit(20, "% of the window")  # a rank waits on its peers this much more
SHARED_CPUS_QUIET = Limit(5, "%", below=True, strict=True)  # overlapping ranks' run delay: P2

# --------------------------------------------------------------------------- layer 3
# A rank's share of CPU time on its device's node: P0 under this (the wrong node); below
# the "good" grade of skills/analysis.GRADES it is P1 (mild)
ON_DEVICE_NODE_WRONG = Limit(0.5, "of CPU time on the device's node", below=True, strict=True)
REMOTE_MEMORY = Limit(0.5, below=True, strict=True)  # numa_locality of a big process (P2)
REMOTE_MEMORY_P1 = Limit(0.3, below=True, strict=True)
BIG_RESIDENT = Limit(256, "MiB")  # resident memory from which locality is judged
FABRIC_BUSY = Limit(80, "% of link capacity")  # UPI/QPI, NVLink, HCCS utilisation

# --------------------------------------------------------------------------- job progress
# A rank "makes no progress" when it ran at most this share of one CPU over the window …
STALLED_CPU = Limit(1.0, "% of a CPU", below=True)
# … and its links to the other ranks carried at most this many bytes per second.
STALLED_LINK = Limit(1024, "B/s", below=True)
# A rank in D state is blocked when it was off CPU at least this share of the window.
BLOCKED_OFF_CPU = Limit(50, "% of the window")

# --------------------------------------------------------------------------- layer 7
LOADER_SATURATED = Limit(90, "%")  # mean loader worker CPU (of one CPU each)
TRAINER_WAITING = Limit(50, "%", below=True, strict=True)  # trainer CPU while it waits on batches
LOADER_RUN_DELAY = Limit(20, "%")  # trainer run delay that means "short of CPU", not data
# main-thread wait samples (collectors/waits.py): the trainer waits on its loader queue …
TRAINER_ON_QUEUE = Limit(25, "% of the window")
# … while its loader workers work (not waiting for the next index) this share of the time
LOADERS_WORKING = Limit(80, "% of the window")
NEW_WORKER_MIN_CPU = 0.05  # the least share of a CPU a new loader worker is counted at
OVERSUBSCRIBED = Limit(2, "× the CPUs", strict=True)  # (ranks + loader workers) / CPUs

# --------------------------------------------------------------------------- cgroup limits
# A cgroup's own counters of why (collectors/cgroups.py): the limit is the subject.
CGROUP_MEMORY_FULL = Limit(90, "% of its limit")  # usage near the limit …
CGROUP_RECLAIM = Limit(20, "major faults or refaults/s")  # … while pages come back from disk
CGROUP_PSI = Limit(10, "% of the window stalled")  # cgroup PSI some share (v2)
CGROUP_IO_AT_LIMIT = Limit(70, "% of its limit")  # I/O moved against the device's io.max
