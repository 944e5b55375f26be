"""What the graph model's classes are built on: an element over one attribute dict, a
metadata record with a pydantic model's face, and the pydantic schemas of both.

An element (a node or an edge) is a thin object over one dict holding exactly the attributes
that were set, so a value that was never measured stays absent instead of turning into a
misleading ``null`` or ``0``, and writing a graph is one ``orjson`` call over those dicts.
Declared attributes that were not set read as ``None`` (the class attribute).

pydantic loads where values are validated, not with the model: each class builds its
pydantic schema on first validation, from its declarations (a bound is declared as
``AtLeast(0)`` and turned into pydantic's own then). A page answered from stored records
(``converters/stored.py``) wraps them and never needs it.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Callable, Mapping
from functools import reduce
from operator import or_
from types import GenericAlias, UnionType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NotRequired, Required, Self

if TYPE_CHECKING:
    from pydantic import BaseModel, TypeAdapter


class AtLeast:
    """A lower bound of a number (``Annotated[int, AtLeast(0)]``): what pydantic's
    ``Field(ge=...)`` says, without importing pydantic to say it (``_for_pydantic`` turns it
    into pydantic's own bound when a schema is built)."""

    __slots__ = ("ge",)

    def __init__(self, ge: float) -> None:
        self.ge = ge

    def __repr__(self) -> str:
        return f"AtLeast({self.ge!r})"


class _ByValue:
    """Equal when of one class with equal attributes; mutable, so never hashed (elements
    and meta records alike)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]


# sets an element's attribute dict through the ``__dict__`` descriptor every element class
# inherits (what ``Element.from_dict`` does, without the attribute lookup per element; for
# ``validation.wrap_trusted``)
set_element_dict = _ByValue.__dict__["__dict__"].__set__


class Element(_ByValue):
    """Common base: the attributes that were set live in the instance dict, in a canonical
    order (identity keys, then declared attributes, then extras in the order they came)."""

    ID_KEYS: ClassVar[tuple[str, ...]] = ()  # identity keys, always written first
    FIELDS: ClassVar[dict[str, int]] = {}  # declared attribute -> its canonical position
    REQUIRED: ClassVar[frozenset[str]] = frozenset()
    # each class's pydantic TypeAdapters, built on first use (read from the class's own
    # __dict__); typed Any here, since the annotations of a class are evaluated at run time
    # (typing.get_type_hints), where pydantic is not imported
    _adapter: ClassVar[Any] = None
    _list_adapter: ClassVar[Any] = None

    source: dict[str, str] | None = None  # attribute -> collector that produced it

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS, cls.REQUIRED = _declared(cls)
        cls._adapter = None
        cls._list_adapter = None

    def __init__(self, **attrs: Any) -> None:
        """Build and validate an element, e.g. ``ProcessNode(id="proc:7", pid=7)``."""
        kind = class_kind(type(self))
        if kind is not None:
            attrs.setdefault("kind", kind)
        object.__setattr__(self, "__dict__", type(self).validate_dict(attrs))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Self:
        """Wrap a dict that ``validate_dict`` (or a list validation) already produced."""
        element = object.__new__(cls)
        object.__setattr__(element, "__dict__", values)
        return element

    @classmethod
    def validate_dict(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Check and coerce one element's attributes (pydantic, lax) into a new dict."""
        adapter = cls.__dict__.get("_adapter")
        if adapter is None:
            from pydantic import TypeAdapter

            adapter = cls._adapter = TypeAdapter(_typed_dict(cls))
        validated: dict[str, Any] = adapter.validate_python(values)
        return validated

    @classmethod
    def list_adapter(cls) -> TypeAdapter[Any]:
        adapter: TypeAdapter[Any] | None = cls.__dict__.get("_list_adapter")
        if adapter is None:
            from pydantic import TypeAdapter

            schema: Any = GenericAlias(list, (_typed_dict(cls),))  # list[schema built at run time]
            adapter = cls._list_adapter = TypeAdapter(schema)
        return adapter

    def __setattr__(self, name: str, value: Any) -> None:
        values = self.__dict__
        if name in values or name not in self.FIELDS:
            values[name] = value
            return
        # a declared attribute set for the first time takes its canonical place, so a graph
        # written, read back and written again gives the same bytes
        values[name] = value
        order = self.FIELDS
        ranked = sorted(values, key=lambda key: order.get(key, _EXTRA_RANK))
        object.__setattr__(self, "__dict__", {key: values[key] for key in ranked})

    def __delattr__(self, name: str) -> None:
        try:
            del self.__dict__[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={value!r}" for key, value in self.__dict__.items())
        return f"{type(self).__name__}({shown})"

    def attrs(self) -> dict[str, Any]:
        """Every attribute that was set, extras included, in the native schema."""
        return dict(self.__dict__)

    def extras(self) -> dict[str, Any]:
        """The attributes no class declares."""
        return {k: v for k, v in self.__dict__.items() if k not in self.FIELDS}

    def copy(self) -> Self:
        """A deep copy (graphs merged into another never share mutable attribute values)."""
        return type(self).from_dict(copy.deepcopy(self.__dict__))

    def get(self, name: str, default: Any = None) -> Any:
        value = self.__dict__.get(name)
        return default if value is None else value

    def set(self, name: str, value: Any, source: str | None = None) -> None:
        """Set one attribute and record its provenance."""
        setattr(self, name, value)
        if source:
            if self.source is None:
                self.source = {}
            self.source[name] = source


_EXTRA_RANK = 1 << 30


def _declared(cls: type[Element]) -> tuple[dict[str, int], frozenset[str]]:
    """Declared attributes of an element class with their canonical positions (identity keys
    first, then base classes' attributes before their subclasses'), and the required ones
    (declared without a default). The annotations are read as written, not evaluated
    (evaluating every class's at import took most of the model's import time)."""
    # base classes first, each class's fields in declaration order
    names = [
        name
        for klass in reversed(cls.__mro__)
        for name, hint in klass.__dict__.get("__annotations__", {}).items()
        if not _is_class_var(hint)
    ]
    ordered = dict.fromkeys([key for key in cls.ID_KEYS if key in names] + names)
    required = frozenset(name for name in ordered if not hasattr(cls, name))
    return {name: rank for rank, name in enumerate(ordered)}, required


def _is_class_var(hint: Any) -> bool:
    if isinstance(hint, str):  # as ``from __future__ import annotations`` leaves it
        return hint.startswith(("ClassVar", "typing.ClassVar"))
    return typing.get_origin(hint) is ClassVar


def class_kind(cls: type) -> str | None:
    """The kind a class stands for (``None`` for the generic ``Node`` and ``Edge``)."""
    kind = getattr(cls, "kind", None)
    return kind if isinstance(kind, str) else None


_TYPED_DICTS: dict[type, Any] = {}  # class -> a TypedDict built at run time


def _typed_dict(cls: type[Element]) -> Any:
    """The pydantic schema of one element class: a TypedDict that keeps extra keys."""
    schema = _TYPED_DICTS.get(cls)
    if schema is None:
        from pydantic import ConfigDict

        # pydantic reads TypedDicts only from typing_extensions before Python 3.12 (pydantic's
        # own dependency, so nothing new is installed)
        from typing_extensions import TypedDict

        hints = typing.get_type_hints(cls, include_extras=True)  # keeps AtLeast(0) bounds
        fields: dict[str, Any] = {}
        for name in cls.FIELDS:
            hint = _for_pydantic(hints[name])
            if name == "kind" and class_kind(cls) is not None:
                hint = Literal[class_kind(cls)]
            fields[name] = (
                Required[hint] if name in cls.REQUIRED or name == "kind" else NotRequired[hint]
            )
        make_typed_dict: Any = TypedDict  # its name and fields are known only at run time
        schema = make_typed_dict(f"{cls.__name__}Attributes", fields, total=False)
        schema.__pydantic_config__ = ConfigDict(extra="allow")
        _TYPED_DICTS[cls] = schema
    return schema


def _for_pydantic(hint: Any) -> Any:
    """A type hint as pydantic reads it: each ``AtLeast`` bound, at any depth, becomes
    pydantic's own (``annotated_types.Ge``, what ``Field(ge=...)`` stands for)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        from annotated_types import Ge

        inner, *metadata = args
        bounds = [Ge(m.ge) if isinstance(m, AtLeast) else m for m in metadata]
        return Annotated[(_for_pydantic(inner), *bounds)]
    if not args:
        return hint
    rebuilt = tuple(map(_for_pydantic, args))
    if rebuilt == args:
        return hint
    if origin in (typing.Union, UnionType):
        return reduce(or_, rebuilt)
    if origin is Literal:
        return hint
    return GenericAlias(origin, rebuilt)


# --------------------------------------------------------------------------- records


class Record(_ByValue):
    """A plain record with a pydantic model's public face (``extra="allow"``): declared
    attributes with their defaults, extra keys kept, ``model_validate``, ``model_dump``,
    ``model_extra``. pydantic validates whatever is built from values (``Cls(**values)``,
    ``model_validate``) through a model it builds on first use from the declarations, so the
    same checks and messages hold; an empty ``Meta()`` (defaults only) and attribute access
    import nothing, which a page answered from the store's rows relies on."""

    # declared attribute -> its default's factory (None: required), in declaration order
    DEFAULTS: ClassVar[dict[str, Callable[[], Any] | None]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.DEFAULTS = {}
        for klass in reversed(cls.__mro__[: cls.__mro__.index(Record)]):  # bases first
            for name in klass.__dict__.get("__annotations__", {}):
                cls.DEFAULTS[name] = _default_of(cls, name)

    def __init__(self, **values: Any) -> None:
        if values or None in self.DEFAULTS.values():
            self.__dict__.update(type(self).model_validate(values).__dict__)
            return
        for name, make in self.DEFAULTS.items():
            self.__dict__[name] = make()  # type: ignore[misc]  # None only when required
        self.__dict__["_extra"] = {}

    @classmethod
    def model_validate(cls, values: Any) -> Self:
        """Validate and coerce ``values`` as the pydantic model would (its ``ValidationError``
        when they do not fit)."""
        if isinstance(values, cls):
            return values
        model = _pydantic_model(cls).model_validate(_as_input(values))
        return cls._from_model(model)

    @classmethod
    def from_trusted(cls, values: dict[str, Any]) -> Self:
        """The record of values validated when they were stored (``graph/trusted.py``, which
        stores only values this gives back as ``model_validate`` would): set as they are,
        defaults for those missing, nested records built alike; nothing is checked and
        nothing imported (``model_validate`` loads pydantic, ~0.1 s in a fresh process)."""
        record = object.__new__(cls)
        hints = _record_hints(cls)
        for name, make in cls.DEFAULTS.items():
            if name in values:
                record.__dict__[name] = _trusted_value(hints[name], values[name])
            else:  # a required one missing: None is not callable, and the row is not trusted
                record.__dict__[name] = make()  # type: ignore[misc]
        record.__dict__["_extra"] = {k: v for k, v in values.items() if k not in cls.DEFAULTS}
        return record

    @classmethod
    def _from_model(cls, model: BaseModel) -> Self:
        record = object.__new__(cls)
        for name in cls.DEFAULTS:
            record.__dict__[name] = _from_models(getattr(model, name))
        record.__dict__["_extra"] = dict(model.__pydantic_extra__ or {})
        return record

    @property
    def model_extra(self) -> dict[str, Any]:
        """The extra keys, as a live dict (changing it changes the record)."""
        extra: dict[str, Any] = self.__dict__["_extra"]
        return extra

    def model_dump(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        """Declared attributes in order, then extras, nested records as dicts; ``exclude_none``
        leaves out keys whose value is None (not inside dicts, as pydantic does); ``mode="json"``
        writes tuples and sets as lists."""
        values = {name: self.__dict__[name] for name in self.DEFAULTS}
        values.update(self.__dict__["_extra"])
        return {
            name: _dumped(value, mode, exclude_none)
            for name, value in values.items()
            if not (exclude_none and value is None)
        }

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (deep or not) with ``update``'s values set as given, not validated."""
        record = object.__new__(type(self))
        if deep:
            record.__dict__.update(copy.deepcopy(self.__dict__))
        else:
            record.__dict__.update(self.__dict__, _extra=dict(self.__dict__["_extra"]))
        for name, value in (update or {}).items():
            setattr(record, name, value)
        return record

    if not TYPE_CHECKING:  # extra keys are read and set as attributes, as on the model

        def __getattr__(self, name: str) -> Any:
            extra = self.__dict__.get("_extra")
            if extra is not None and name in extra:
                return extra[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def __setattr__(self, name: str, value: Any) -> None:
            if name in self.DEFAULTS:
                self.__dict__[name] = value
            else:
                self.__dict__["_extra"][name] = value

    def __repr__(self) -> str:
        values = {name: self.__dict__[name] for name in self.DEFAULTS}
        values.update(self.__dict__["_extra"])
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        return f"{type(self).__name__}({shown})"


class _Factory:
    """A mutable default: each record gets its own (``field(default_factory=...)``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def factory(make: Callable[[], Any]) -> Any:
    return _Factory(make)


_REQUIRED = object()


def _default_of(cls: type[Record], name: str) -> Callable[[], Any] | None:
    """What makes the default of a declared attribute (None: it is required)."""
    default = getattr(cls, name, _REQUIRED)
    if default is _REQUIRED:
        return None
    if isinstance(default, _Factory):
        return default.make
    return lambda: default


def _as_input(value: Any) -> Any:
    """Records inside the values (``Meta(collectors=[CollectorStatus(...)])``) as dicts."""
    if isinstance(value, Record):
        return value.model_dump()
    if isinstance(value, dict):
        return {key: _as_input(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_input(item) for item in value]
    return value


def _from_models(value: Any) -> Any:
    """A validated value with each pydantic model in it turned into its record."""
    record_class = _RECORDS.get(type(value))
    if record_class is not None:
        return record_class._from_model(value)
    if isinstance(value, list):
        return [_from_models(item) for item in value]
    return value


_HINTS: dict[type[Record], dict[str, Any]] = {}


def _record_hints(cls: type[Record]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _trusted_value(hint: Any, value: Any) -> Any:
    """A stored value with the records its declaration nests built (as ``_nested_models``
    nests their pydantic models)."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_trusted(value)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args:
        return [_trusted_value(args[0], item) for item in value]
    return value


def _dumped(value: Any, mode: str, exclude_none: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode=mode, exclude_none=exclude_none)
    if isinstance(value, dict):
        return {key: _dumped(item, mode, exclude_none) for key, item in value.items()}
    if isinstance(value, list) or (mode == "json" and isinstance(value, tuple | set | frozenset)):
        return [_dumped(item, mode, exclude_none) for item in value]
    return value


# record class -> its pydantic model, built on first use, and back
_MODELS: dict[type[Record], type[BaseModel]] = {}
_RECORDS: dict[type, type[Record]] = {}


def _pydantic_model(cls: type[Record]) -> type[BaseModel]:
    """The pydantic model of a record class, named as it is (so its messages are the same),
    from its declarations (records nested in it by their own models)."""
    model: type[BaseModel] | None = _MODELS.get(cls)
    if model is None:
        from pydantic import ConfigDict, Field, create_model

        hints = typing.get_type_hints(cls, include_extras=True)
        fields: dict[str, Any] = {}
        for name, make in cls.DEFAULTS.items():
            hint = _nested_models(_for_pydantic(hints[name]))
            fields[name] = (hint, ...) if make is None else (hint, Field(default_factory=make))
        model = create_model(cls.__name__, __config__=ConfigDict(extra="allow"), **fields)
        _MODELS[cls] = model
        _RECORDS[model] = cls
    return model


def _nested_models(hint: Any) -> Any:
    """``list[CollectorStatus]`` → ``list[<CollectorStatus's pydantic model>]``."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return _pydantic_model(hint)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args:
        return GenericAlias(list, (_nested_models(args[0]),))
    return hint
