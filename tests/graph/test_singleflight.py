"""SingleFlight: concurrent callers of one key share one computation (and its error);
other keys compute in parallel. The graph cache's budget stays within the process's memory."""

from __future__ import annotations

import threading
import time

import pytest
from wp_mcp.graph.membudget import (
    CACHE_SHARE,
    DEFAULT_CACHE_MB,
    graph_cache_bytes,
    memory_limit_bytes,
)
from wp_mcp.graph.singleflight import SingleFlight


def run_together(count: int, target) -> list:
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def one(index: int) -> None:
        barrier.wait()
        try:
            results[index] = target(index)
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_concurrent_callers_of_one_key_share_one_computation() -> None:
    flights, made = SingleFlight(), []

    def make() -> object:
        made.append(1)
        time.sleep(0.3)  # long enough for every caller to arrive meanwhile
        return object()

    results = run_together(8, lambda _: flights.run("k", make))
    assert len(made) == 1 and len({id(r) for r in results}) == 1
    assert flights.running() == 0


def test_the_error_reaches_every_waiter_and_the_next_call_tries_again() -> None:
    flights, tries = SingleFlight(), []

    def failing() -> None:
        tries.append(1)
        time.sleep(0.3)
        raise ValueError("cannot")

    results = run_together(4, lambda _: flights.run("k", failing))
    assert len(tries) == 1 and all(isinstance(r, ValueError) for r in results)
    assert flights.run("k", lambda: 5) == 5


def test_different_keys_compute_in_parallel() -> None:
    flights, inside, most = SingleFlight(), [], []
    lock = threading.Lock()

    def make(index: int) -> int:
        with lock:
            inside.append(index)
            most.append(len(inside))
        time.sleep(0.3)
        with lock:
            inside.remove(index)
        return index

    assert run_together(4, lambda i: flights.run(i, lambda: make(i))) == [0, 1, 2, 3]
    assert max(most) > 1


@pytest.mark.parametrize("setting", [None, "abc", "-5", "nan", "inf"])
def test_the_graph_cache_budget_is_a_share_of_the_memory_the_process_may_use(setting) -> None:
    budget = graph_cache_bytes(setting)
    limit = memory_limit_bytes()
    assert 0 < budget <= DEFAULT_CACHE_MB * 2**20
    if limit:
        assert budget <= limit * CACHE_SHARE


def test_a_smaller_setting_is_kept() -> None:
    assert graph_cache_bytes("64") == 64 * 2**20
