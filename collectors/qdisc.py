"""The queueing disciplines of a namespace's interfaces, as the nic collector keeps them:
one list of qdicts per interface (classes of an htb inside its qdisc), their deltas over the
window, and the root qdisc's figures and a shaper's ceiling summed up on the nic."""

from __future__ import annotations

import socket
from typing import Any

from .rtnetlink import QDISC_COUNTERS, dump_classes, dump_qdiscs

_ROOT_FIGURES = ("backlog_bytes", "backlog_packets", "drops", "overlimits", "requeues")


def read_qdiscs(sock: socket.socket) -> dict[int, list[dict[str, Any]]]:
    """Interface index → its qdiscs, root first; an htb qdisc holds its ``classes``."""
    by_link: dict[int, list[dict[str, Any]]] = {}
    for index, qdisc in dump_qdiscs(sock):
        by_link.setdefault(index, []).append(qdisc)
    for index, qdiscs in by_link.items():
        qdiscs.sort(key=lambda q: q["parent"] != "root")
        classful = {q["handle"]: q for q in qdiscs if q.get("kind") == "htb"}
        if not classful:
            continue
        for tc_class in dump_classes(sock, index):
            owner = classful.get(tc_class["handle"].split(":")[0] + ":")
            if owner is not None:
                owner.setdefault("classes", []).append(tc_class)
    return by_link


def qdisc_window(first: list[dict[str, Any]], last: list[dict[str, Any]], window_s: float) -> None:
    """Add ``window_<counter>`` deltas and ``bytes_per_s`` to each qdisc and class of ``last``
    that ``first`` also had (a qdisc replaced meanwhile has counters from zero: no delta)."""
    before = {_key(q): q for q in first}
    for qdisc in last:
        old = before.get(_key(qdisc))
        if old is None:
            continue
        _add_deltas(old, qdisc, window_s)
        old_classes = {c["handle"]: c for c in old.get("classes", [])}
        for tc_class in qdisc.get("classes", []):
            if tc_class["handle"] in old_classes:
                _add_deltas(old_classes[tc_class["handle"]], tc_class, window_s)


def qdisc_summary(qdiscs: list[dict[str, Any]]) -> dict[str, Any]:
    """The nic's ``qdisc*`` attributes: its root qdisc's figures, and a shaper's ceiling."""
    if not qdiscs:
        return {}
    attrs: dict[str, Any] = {"qdiscs": qdiscs}
    root = next((q for q in qdiscs if q["parent"] == "root"), None)
    if root is not None:
        attrs["qdisc"] = root.get("kind")
        for name in _ROOT_FIGURES:
            if name in root:
                attrs[f"qdisc_{name}"] = root[name]
        for name in ("drops", "overlimits", "requeues"):
            if f"window_{name}" in root:
                attrs[f"window_qdisc_{name}"] = root[f"window_{name}"]
    ceiling = shaped_rate(qdiscs)
    if ceiling is not None:
        attrs["qdisc_rate_bytes_per_s"] = ceiling
    return attrs


def shaped_rate(qdiscs: list[dict[str, Any]]) -> int | None:
    """The most an interface's shapers let through: the lowest tbf rate, the highest ceil of
    an htb's top classes (traffic of another class may use less), the lower of the two."""
    rates = [
        q["rate_bytes_per_s"] for q in qdiscs if q.get("kind") == "tbf" and "rate_bytes_per_s" in q
    ]
    for qdisc in qdiscs:
        ceils = [c["ceil_bytes_per_s"] for c in qdisc.get("classes", [])
                 if c.get("parent") == "root" and "ceil_bytes_per_s" in c]  # fmt: skip
        if ceils:
            rates.append(max(ceils))
    return min(rates) if rates else None


def _key(qdisc: dict[str, Any]) -> tuple[Any, ...]:
    return qdisc.get("handle"), qdisc.get("parent"), qdisc.get("kind")


def _add_deltas(old: dict[str, Any], new: dict[str, Any], window_s: float) -> None:
    deltas = {name: new[name] - old[name] for name in QDISC_COUNTERS if name in new and name in old}
    if min(deltas.values(), default=0) < 0:
        return
    for name, delta in deltas.items():
        new[f"window_{name}"] = delta
    if "bytes" in deltas:
        new["bytes_per_s"] = round(deltas["bytes"] / window_s, 1)
