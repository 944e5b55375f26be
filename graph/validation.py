"""Validating lists of nodes or edges: one pydantic call per kind, or none at all.

A graph's elements come in lists of tens of thousands. They are grouped by kind and each
kind's run is validated against its own class (several times faster on large graphs than a
union dispatched per element). Most runs hold only strings, whole numbers and floats where
the schema asks for exactly those: *the plain path* checks that with a few passes per
declared attribute and wraps the dicts as they are; anything else (a value pydantic would
coerce or refuse, a nested dict or list attribute, a non-dict) goes through pydantic, which
also writes the error. pydantic is imported only there, so a small file whose elements are
all plain is read without loading it (``tests/server/test_show_startup.py``).

The classes come in as arguments (``graph/model.py`` passes its tables), so this module
knows no kind by name.
"""

from __future__ import annotations

import typing
from collections import defaultdict, deque
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any

from .elements import Element, class_kind, set_element_dict

ElementClasses = dict[str, Any]  # kind -> its class (a dict of node or of edge classes)


class ElementsError(ValueError):
    """Validation of a list of nodes or edges failed: where (original position) and why."""

    def __init__(self, position: int, field: str, message: str, found: Any, more: int) -> None:
        self.position, self.field, self.found, self.more = position, field, found, more
        super().__init__(message)


def validate_grouped(
    items: list[Any], classes: ElementClasses, generic: type[Element]
) -> list[Any]:
    """Validate a list of element dicts, one pydantic call per kind, and wrap each in its
    kind's class, keeping their order. Where every run passes the plain path (nothing
    coerced), the dicts are wrapped as they stand."""
    positions: dict[Any, list[int]] = defaultdict(list)  # kind -> where its elements are
    for position, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, dict) else None
        # anything without a string kind is validated as generic, where the schema says
        # what is wrong with it
        positions[kind if type(kind) is str else ""].append(position)
    runs = [
        (classes.get(kind, generic), where, [items[position] for position in where])
        for kind, where in sorted(positions.items())
    ]
    plain = [_plainly_valid(cls, run) for cls, _, run in runs]
    if all(plain):  # the common case: wrapped in their own order
        return wrap_trusted(items, classes, generic)
    elements: list[Any] = [None] * len(items)
    for (cls, where, run), plainly_valid in zip(runs, plain, strict=True):
        values = run if plainly_valid else _validated_by_pydantic(cls, where, run)
        for position, value in zip(where, values, strict=True):
            elements[position] = cls.from_dict(value)
    return elements


def _validated_by_pydantic(cls: type[Element], where: list[int], run: list[Any]) -> list[Any]:
    from pydantic import ValidationError  # loaded only where pydantic validates

    try:
        values: list[Any] = cls.list_adapter().validate_python(run)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = list(first["loc"])
        index = int(loc.pop(0)) if loc and isinstance(loc[0], int) else 0
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
        message = first["msg"].lower()
        raise ElementsError(
            where[index], field, message, first.get("input"), exc.error_count() - 1
        ) from None
    return values


def valid_as_they_are(items: list[Any], classes: ElementClasses, generic: type[Element]) -> bool:
    """Whether these element dicts pass validation unchanged (nothing refused, nothing
    coerced): then validating them again when they are read back would give the same
    elements, and the store may trust them (graph/trusted.py)."""
    runs: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        kind = item.get("kind") if isinstance(item, dict) else None
        if type(kind) is not str:
            return False
        runs[kind].append(item)
    for kind, run in runs.items():
        cls = classes.get(kind, generic)
        if _plainly_valid(cls, run):
            continue
        from pydantic import ValidationError  # loaded only where pydantic validates

        try:
            if cls.list_adapter().validate_python(run) != run:
                return False
        except ValidationError:
            return False
    return True


def wrap_trusted(items: list[Any], classes: ElementClasses, generic: type[Element]) -> list[Any]:
    """Elements of each dict's kind's class around the dicts themselves, unchecked (the
    store's own rows, validated when stored).

    The one speed trick of this module, kept because it earns it: C-level passes, no Python
    frame per element, each dict set through the ``__dict__`` descriptor itself. A store
    read wraps every element of a snapshot, and a plain loop made reading a 64-host graph
    back ~15 % slower (benchmarks/README.md)."""
    kinds = [item["kind"] for item in items]
    class_of = {kind: classes.get(kind, generic) for kind in set(kinds)}
    elements: list[Any] = list(map(object.__new__, map(class_of.__getitem__, kinds)))
    deque(map(set_element_dict, elements, items), maxlen=0)
    return elements


# --------------------------------------------------------------------------- the plain path

_NONE = type(None)
_PLAIN_TYPES = (str, int, float, bool)


@dataclass(frozen=True)
class _PlainCheck:
    """What the plain path checks of one declared attribute over a run."""

    name: str
    types: frozenset[type]  # exact types accepted (None among them when it may be absent)
    minimum: float | None = None
    literal: str | None = None  # the one value a class's ``kind`` may take
    # a dict of str to one plain type, or a list of one plain type: the types its members
    # may have (its own type is then dict or list)
    members: frozenset[type] | None = None


_PLAIN_CHECKS: dict[type, tuple[_PlainCheck, ...] | None] = {}  # each class's, once made


def _plain_checks(cls: type[Element]) -> tuple[_PlainCheck, ...] | None:
    """What the plain path checks for ``cls``, or None where a required attribute is not
    plain."""
    if cls not in _PLAIN_CHECKS:
        hints = typing.get_type_hints(cls, include_extras=True)
        checks = [
            _plain_check(name, hints[name], name in cls.REQUIRED or name == "kind", cls)
            for name in cls.FIELDS
        ]
        _PLAIN_CHECKS[cls] = None if None in checks else tuple(c for c in checks if c)
    return _PLAIN_CHECKS[cls]


def _plain_check(name: str, hint: Any, required: bool, cls: type[Element]) -> _PlainCheck | None:
    if name == "kind" and class_kind(cls) is not None:
        return _PlainCheck(name, frozenset({str}), literal=class_kind(cls))
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, UnionType) else ()
    optional = _NONE in args
    if args:
        rest = [a for a in args if a is not _NONE]
        if len(rest) != 1:
            return None
        hint = rest[0]
    minimum = None
    if typing.get_origin(hint) is Annotated:
        hint, *metadata = typing.get_args(hint)
        bounds = [m for info in metadata for m in getattr(info, "metadata", [info])]
        if any(not hasattr(bound, "ge") for bound in bounds):
            return None
        minimum = max((bound.ge for bound in bounds), default=None)
    members: frozenset[type] | None = None
    container = _plain_members(hint)
    if container is not None:
        hint, members = container
    elif hint not in _PLAIN_TYPES:
        # a deeper value (a dict of dicts, a list of ports): plain only where no element has
        # one, so pydantic checks every one there is
        return None if required and not optional else _PlainCheck(name, frozenset({_NONE}))
    types = {hint} if required and not optional else {hint, _NONE}
    return _PlainCheck(name, frozenset(types), minimum, members=members)


def _plain_members(hint: Any) -> tuple[type, frozenset[type]] | None:
    """``dict[str, float]`` → (dict, {float}); ``list[str]`` → (list, {str}); else None."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in _PLAIN_TYPES:
        return dict, frozenset({args[1]})
    if origin is list and len(args) == 1 and args[0] in _PLAIN_TYPES:
        return list, frozenset({args[0]})
    return None


def _plainly_valid(cls: type[Element], run: list[Any]) -> bool:
    checks = _plain_checks(cls)
    if checks is None or not all(type(item) is dict for item in run):
        return False
    keys = set().union(*run)  # attributes no element has need no pass of their own
    for check in checks:
        if check.name not in keys:
            if _NONE not in check.types:
                return False
            continue
        name = check.name
        if not check.types.issuperset({type(item.get(name)) for item in run}):
            return False
        if check.literal is None and check.minimum is None and check.members is None:
            continue  # (most attributes: their types were all there was to check)
        given = [item[name] for item in run if item.get(name) is not None]
        if check.literal is not None and set(given) != {check.literal}:
            return False
        if check.members is not None and not _plain_members_valid(check.members, given):
            return False
        if check.minimum is not None and given and min(given) < check.minimum:
            return False
    return True


def _plain_members_valid(members: frozenset[type], containers: list[Any]) -> bool:
    """Dicts of str keys or lists whose members all have one of the accepted types."""
    found: set[type] = set()
    for container in containers:
        if type(container) is dict:
            if not all(type(key) is str for key in container):
                return False
            found.update(type(value) for value in container.values())
        else:
            found.update(type(value) for value in container)
    return members.issuperset(found)
