"""The ``hosts`` view: one line per host of a cluster graph, worst first (built in
converters/cluster.py with the cluster summary's per-host scan)."""

from __future__ import annotations

from ..cluster import hosts_view
from . import view

LEGEND = (
    "host ranks (numbers) host-cpu xhost-sent loss (sent across hosts, retransmitted) "
    "run-max (slowest rank's run delay) loc (ranks' NUMA locality) off-node (processes "
    "driving a device from another NUMA node) downtrained (PCIe links below capability); "
    "hosts where something stands out first, nodes not collected on top, N× quiet = hosts "
    "below every floor; one host: filter host=H"
)

view("hosts", legend=LEGEND)(hosts_view)
