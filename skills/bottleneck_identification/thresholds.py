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

# --------------------------------------------------------------------------- layer 5
DISK_UTIL = Limit(90, "%")  # share of the window with I/O in flight (iostat %util)
DISK_AWAIT = Limit(20, "ms")  # average wait per request (P2)
DISK_AWAIT_P1 = Limit(100, "ms")
IOWAIT = Limit(10, "%")  # host CPU time idle waiting for I/O
DISK_QUEUE = Limit(32, "requests")  # average requests in flight
IO_NAMED_RATE = Limit(1 << 20, "B/s")  # a process moving less than this is not named
IO_NAMED_MAX = 4  # how many readers/writers an I/O finding names

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
