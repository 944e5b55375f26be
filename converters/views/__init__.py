"""Every paged view, one module each, registered as data (docs/architecture.md).

A view is a function from the graph's ``Facts`` to its items, most significant first,
decorated with ``@view(...)``, which records what the rest of the code needs to know about
it: the ``#legend`` line (its compact grammar), the filters its ``#more`` line suggests and,
for the seven layers, what the summary's top line is about. Adding a view is one new module
here (named as the view) plus its name in ``catalog.VIEWS`` (CONTRIBUTING.md shows one).

A page of one view imports that view's module alone (:func:`view_named`); what lists the
views (:func:`names`, :func:`layers`: the summary) imports every listed one first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .. import catalog
from ..catalog import SPECIAL
from ..facts import Facts
from ..items import Item

Builder = Callable[[Facts], list[Item]]
DEFAULT_NARROW = "kind=… pid=… name=…"


@dataclass(frozen=True)
class View:
    name: str
    build: Builder  # the items, most significant first
    legend: str  # the #legend line: what each field of its lines means
    narrow: str = DEFAULT_NARROW  # filters suggested when a view has more pages
    # One of the layers the summary lists with its cost and top line: the first item of
    # these kinds (in this order, single entities before groups) is its top line.
    top: tuple[str, ...] | None = None

    @property
    def is_layer(self) -> bool:
        return self.top is not None


REGISTRY: dict[str, View] = {}


def view(
    name: str, *, legend: str, narrow: str = DEFAULT_NARROW, top: tuple[str, ...] | None = None
) -> Callable[[Builder], Builder]:
    """Register the decorated function as the builder of view ``name``."""

    def register(build: Builder) -> Builder:
        if name in REGISTRY or name in SPECIAL:
            raise ValueError(f"view {name!r} is registered twice")
        REGISTRY[name] = View(name, build, legend, narrow, top)
        return build

    return register


def layers() -> list[View]:
    """The layers, in the catalog's order (the summary's order)."""
    load_listed()
    return [v for v in REGISTRY.values() if v.is_layer]


def names() -> tuple[str, ...]:
    """``summary``, every listed and registered view, ``entity``: read at each call, so a
    view registered after import (a plug-in, a test) is listed too."""
    load_listed()
    return (SPECIAL[0], *REGISTRY, SPECIAL[1])


def view_named(name: str) -> View | None:
    """The view ``name``, its module imported if ``catalog.VIEWS`` lists it and it is not
    registered yet; None for a name no view has."""
    if name not in REGISTRY and name in catalog.VIEWS and name not in SPECIAL:
        _load(name)
    return REGISTRY.get(name)


def load_listed() -> None:
    """Import the module of each view that ``catalog.VIEWS`` names (its registration line),
    and keep the registry in the catalog's order, whichever was loaded first (a registered
    view that the catalog does not list, a test's, follows them)."""
    listed = [name for name in catalog.VIEWS if name not in SPECIAL]
    for name in listed:
        if name not in REGISTRY:
            _load(name)
    if list(REGISTRY)[: len(listed)] != listed:
        ordered = {name: REGISTRY[name] for name in listed}
        ordered.update(REGISTRY)
        REGISTRY.clear()
        REGISTRY.update(ordered)


def _load(name: str) -> None:
    """Import the module of view ``name``, which must register it."""
    importlib.import_module(f".{name}", __name__)
    if name not in REGISTRY:
        raise ImportError(f"converters/views/{name}.py registers no view named {name!r}")
