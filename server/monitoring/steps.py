"""The jobs' step timelines on ``/metrics``, beside ``wp_job_steps_per_second`` (the
monitor's baseline metric, a key metric like the ranks'): the step time's quantiles in
seconds, the share of it spent exchanging, and per rank the share it waited and the share
of steps it arrived last (Prometheus naming: base units, ``_ratio`` for 0..1)."""

from __future__ import annotations

from typing import Any

from wp_mcp.graph import Graph
from wp_mcp.graph.query import step_jobs

QUANTILES = (("0.5", "step_ms_p50"), ("0.99", "step_ms_p99"))


class StepGauges:
    def __init__(self, registry: Any) -> None:
        from prometheus_client import Gauge

        self.step = Gauge("wp_job_step_duration_seconds", "a job's step time (step timeline)",
                          ["job", "quantile"], registry=registry)  # fmt: skip
        self.comm = Gauge("wp_job_comm_ratio", "share of a job's step time spent exchanging",
                          ["job"], registry=registry)  # fmt: skip
        self.wait = Gauge("wp_job_rank_wait_ratio", "share of the step a rank waited for the last",
                          ["job", "rank"], registry=registry)  # fmt: skip
        self.last = Gauge("wp_job_rank_last_arrival_ratio", "share of steps a rank arrived last",
                          ["job", "rank"], registry=registry)  # fmt: skip

    def update(self, graph: Graph) -> None:
        for gauge in (self.step, self.comm, self.wait, self.last):
            gauge.clear()
        for job in step_jobs(graph):
            for quantile, name in QUANTILES:
                value = job.figure(name)
                if value is not None:
                    self.step.labels(job.label, quantile).set(value / 1000)
            if (comm := job.figure("comm_share")) is not None:
                self.comm.labels(job.label).set(comm)
            for rank in job.ranks:
                if (wait := rank.get("wait_share")) is not None:
                    self.wait.labels(job.label, rank.id).set(wait)
                if (last := rank.get("last_arrival_share")) is not None:
                    self.last.labels(job.label, rank.id).set(last)
