"""The rankenv collector: a launcher's rank variables read from a live process's
environment, and nothing else of it (secrets sit beside them)."""

from __future__ import annotations

import os
import subprocess
import sys

from wp_mcp.collectors.base import Context
from wp_mcp.collectors.rankenv import RankEnvCollector
from wp_mcp.graph import Graph


def test_rank_variables_are_read_from_the_environment_and_secrets_are_not():
    env = {**os.environ, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "API_TOKEN": "s3cret"}  # fmt: skip
    ranked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        graph = Graph()
        for proc in (ranked, plain):
            graph.add("process", f"proc:{proc.pid}", pid=proc.pid)
        outcome = RankEnvCollector().collect(graph, Context())
        node = graph.nodes[f"proc:{ranked.pid}"]
        assert outcome.details == {"ranks": 1}
        assert (node.get("rank"), node.get("world_size"), node.get("local_rank")) == (3, 4, 1)
        assert (node.get("master_addr"), node.get("master_port")) == ("10.0.0.1", 29500)
        assert "s3cret" not in str(node.attrs())
        assert graph.nodes[f"proc:{plain.pid}"].get("rank") is None
    finally:
        for proc in (ranked, plain):
            proc.kill()
            proc.wait()
