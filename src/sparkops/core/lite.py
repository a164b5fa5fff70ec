"""A small stand-in for the part of pydantic v2's ``BaseModel`` that the ``preflight --quick`` path uses.

Importing pydantic and building its validators costs the quick path about 230 ms of CPU on the
device; the models themselves stay defined once, in their modules, against
:mod:`sparkops.core.modeling`, which hands out pydantic's names by default and this module's after
:func:`sparkops.core.modeling.use_lite`.

Exact or nothing. Every rule here was taken from pydantic 2.x by experiment (the differential
tests in ``tests/test_lite_models.py`` keep it so):

* a class whose annotations, config keys, ``Field`` options or validator modes are not implemented
  here is refused when it is built (:class:`LiteUnsupported`), never validated differently;
* an input whose outcome is not certain (a numeric string for an int, a set for a list, a datetime
  as a number...) raises :class:`LiteDeclined` instead of guessing; so does a validation error
  while :data:`DECLINE_ON_ERROR` is set (the front end sets it: pydantic's error texts are not
  reproduced here, and a live run that meets one is answered by pydantic instead);
* serialising a value that does not match its field's type (where pydantic would warn or infer)
  declines the same way.

:class:`LiteDeclined` is not a ``ValueError``: no ``except ValueError`` in the tool swallows it.
"""

from __future__ import annotations

import copy
import math
import re
import sys
import threading
import types
import typing
from datetime import date, datetime, timedelta
from enum import Enum
from typing import Any

DECLINE_ON_ERROR = False  # set by the front end: a validation error declines the lite run
DECLINED: list[str] = []  # every refusal and decline of this process, even one a caller swallowed


class LiteUnsupported(TypeError):
    """A model uses something this runtime does not implement (found when the class is built)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        DECLINED.append(f"unsupported: {args[0] if args else ''}")


class LiteDeclined(Exception):  # noqa: N818 - a decision, not an error of the input
    """An input or value whose pydantic outcome this runtime does not reproduce with certainty."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        DECLINED.append(f"declined: {args[0] if args else ''}")


_MISSING = object()
_BUILD_LOCK = threading.RLock()
_EXACT, _STRICT, _LAX = 3, 2, 1

# --------------------------------------------------------------------------- public stand-ins

CONFIG_KEYS = frozenset({"extra", "frozen", "defer_build"})
FIELD_KEYS = frozenset({"default_factory", "description", "ge", "gt", "le", "lt", "union_mode"})


def ConfigDict(**kw: Any) -> dict:  # noqa: N802 - pydantic's name
    unknown = set(kw) - CONFIG_KEYS
    if unknown:
        raise LiteUnsupported(f"ConfigDict keys not implemented: {sorted(unknown)}")
    if kw.get("extra", "forbid") not in ("forbid", "ignore"):
        raise LiteUnsupported(f"extra={kw['extra']!r} not implemented")
    return dict(kw)


class FieldInfo:
    """What ``Field(...)`` records: the default, its factory, the description and the constraints."""

    __slots__ = ("annotation", "default", "default_factory", "description", "ge", "gt", "le", "lt", "union_mode")

    def __init__(self, default: Any = _MISSING, **kw: Any) -> None:
        unknown = set(kw) - FIELD_KEYS
        if unknown:
            raise LiteUnsupported(f"Field options not implemented: {sorted(unknown)}")
        if kw.get("union_mode", "smart") not in ("smart", "left_to_right"):
            raise LiteUnsupported(f"union_mode={kw['union_mode']!r}")
        self.annotation: Any = None
        self.default = default if default is not ... else _MISSING
        self.default_factory = kw.get("default_factory")
        self.description = kw.get("description")
        self.ge, self.gt, self.le, self.lt = kw.get("ge"), kw.get("gt"), kw.get("le"), kw.get("lt")
        self.union_mode = kw.get("union_mode")

    def is_required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def constraints(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("ge", "gt", "le", "lt") if getattr(self, k) is not None}


def Field(default: Any = _MISSING, **kw: Any) -> Any:  # noqa: N802 - pydantic's name
    return FieldInfo(default, **kw)


class BeforeValidator:
    __slots__ = ("func",)

    def __init__(self, func: Any) -> None:
        self.func = func


class _Decorator:
    """A ``field_validator``/``model_validator`` in a class body, collected when the class is made."""

    def __init__(self, kind: str, func: Any, mode: str, fields: tuple[str, ...] = ()) -> None:
        self.kind, self.func, self.mode, self.fields = kind, func, mode, fields


def field_validator(*fields: str, mode: str = "after", **kw: Any) -> Any:
    if kw or mode != "after" or not fields:
        raise LiteUnsupported(f"field_validator options not implemented: mode={mode!r} {sorted(kw)}")
    return lambda func: _Decorator("field", func, mode, fields)


def model_validator(*, mode: str) -> Any:
    if mode not in ("before", "after"):
        raise LiteUnsupported(f"model_validator mode={mode!r} not implemented")
    return lambda func: _Decorator("model", func, mode)


class ValidationError(ValueError):
    """A refused input: ``errors()`` lists ``type``, ``loc``, ``msg`` and ``input`` like pydantic's
    (the locations and types follow pydantic's; the message texts are this runtime's own)."""

    def __init__(self, title: str, errors: list[dict]) -> None:
        self.title, self._errors = title, errors
        super().__init__(str(self))

    def errors(self) -> list[dict]:
        return [dict(e) for e in self._errors]

    def error_count(self) -> int:
        return len(self._errors)

    def __str__(self) -> str:
        lines = [f"{len(self._errors)} validation error{'s' if len(self._errors) != 1 else ''} for {self.title}"]
        for e in self._errors:
            lines += [".".join(str(p) for p in e["loc"]) or "(top)", f"  {e['msg']} [type={e['type']}]"]
        return "\n".join(lines)


class _Unsure(Exception):  # noqa: N818 - internal: a union may still decide without this member
    """This runtime cannot say what pydantic does with the input (:class:`LiteDeclined` at the top)."""


class _Invalid(Exception):  # noqa: N818 - internal: carries errors up to the model
    def __init__(self, errors: list[dict]) -> None:
        self.errors = errors


def _bad(kind: str, msg: str, value: Any, loc: tuple = ()) -> _Invalid:
    return _Invalid([{"type": kind, "loc": loc, "msg": msg, "input": value}])


def _prefix(errors: list[dict], part: Any) -> list[dict]:
    return [{**e, "loc": (part, *e["loc"])} for e in errors]


# --------------------------------------------------------------------------- validators by type
# each takes a value and returns (validated value, exactness), or raises _Invalid or LiteDeclined

def _v_any(v: Any) -> tuple[Any, int]:
    return v, _EXACT


def _v_none(v: Any) -> tuple[Any, int]:
    if v is None:
        return None, _EXACT
    raise _bad("none_required", "Input should be None", v)


_NOT_NUMBER = (type(None), list, dict, tuple, set, frozenset)


def _v_int(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is int:
        return v, _EXACT
    if t is bool:
        return int(v), _LAX
    if t is float:
        if not math.isfinite(v):
            raise _bad("finite_number", "Input should be a finite number", v)
        if not v.is_integer():
            raise _bad("int_from_float", "Input should be a valid integer, got a number with a fractional part", v)
        if abs(v) < 2**53:
            return int(v), _LAX
    if t in _NOT_NUMBER:
        raise _bad("int_type", "Input should be a valid integer", v)
    raise _Unsure(f"int from {t.__name__}")


def _v_float(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is float:
        return v, _EXACT
    if t is int:
        if abs(v) < 2**53:
            return float(v), _STRICT
    elif t is bool:
        return float(v), _LAX
    elif t in _NOT_NUMBER:
        raise _bad("float_type", "Input should be a valid number", v)
    raise _Unsure(f"float from {t.__name__}")


def _v_str(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is str:
        return v, _EXACT
    if t in (int, float, bool, *_NOT_NUMBER):
        raise _bad("string_type", "Input should be a valid string", v)
    raise _Unsure(f"str from {t.__name__}")


def _v_bool(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is bool:
        return v, _EXACT
    if t in (int, float):
        if v in (0, 1):
            return bool(v), _LAX
        raise _bad("bool_parsing", "Input should be a valid boolean", v)
    if t in _NOT_NUMBER:
        raise _bad("bool_type", "Input should be a valid boolean", v)
    raise _Unsure(f"bool from {t.__name__}")


_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)?")
_DAY = re.compile(r"\d{4}-\d\d-\d\d")


def _v_datetime(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is datetime:
        return v, _EXACT
    if t is str and _RFC3339.fullmatch(v):
        try:
            got = datetime.fromisoformat(v[:-1] + "+00:00" if v.endswith("Z") else v)
        except ValueError:
            raise _Unsure("datetime text out of range") from None
        return got, _LAX
    if t in (type(None), list, dict, tuple, bool):
        raise _bad("datetime_type", "Input should be a valid datetime", v)
    raise _Unsure(f"datetime from {t.__name__}")


def _v_date(v: Any) -> tuple[Any, int]:
    t = type(v)
    if t is date:
        return v, _EXACT
    if t is str and _DAY.fullmatch(v):
        try:
            return date.fromisoformat(v), _LAX
        except ValueError:
            raise _Unsure("date text out of range") from None
    if t in (type(None), list, dict, tuple, bool):
        raise _bad("date_type", "Input should be a valid date", v)
    raise _Unsure(f"date from {t.__name__}")


def _literal(values: tuple) -> Any:
    for x in values:
        if type(x) not in (str, int, bool):
            raise LiteUnsupported(f"Literal value {x!r}")

    def check(v: Any) -> tuple[Any, int]:
        for x in values:
            if type(v) is type(x) and v == x:
                return v, _EXACT
        for x in values:
            if v == x:  # equal across types (True == 1, 1.0 == 1, a str enum == its value): pydantic's rules vary
                raise _Unsure(f"Literal {values!r} from {type(v).__name__}")
        raise _bad("literal_error", f"Input should be {' or '.join(repr(x) for x in values)}", v)
    return check


def _enum(cls: type[Enum]) -> Any:
    if not (issubclass(cls, str) and all(type(m.value) is str for m in cls)):
        raise LiteUnsupported(f"enum {cls.__name__}: only str enums are implemented")
    by_value = {m.value: m for m in cls}

    def check(v: Any) -> tuple[Any, int]:
        if type(v) is cls:
            return v, _EXACT
        if type(v) is str:
            if v in by_value:
                return by_value[v], _LAX
            raise _bad("enum", f"Input should be {', '.join(repr(k) for k in by_value)}", v)
        if type(v) in (int, float, bool, *_NOT_NUMBER):
            raise _bad("enum", f"Input should be {', '.join(repr(k) for k in by_value)}", v)
        raise _Unsure(f"enum from {type(v).__name__}")
    return check


def _items(item: Any, values: Any, worst: int) -> tuple[list, int]:
    out, errors = [], []
    for i, x in enumerate(values):
        try:
            got, ex = item(x)
            out.append(got)
            worst = min(worst, ex)
        except _Invalid as exc:
            errors += _prefix(exc.errors, i)
    if errors:
        raise _Invalid(errors)
    return out, worst


def _list(item: Any) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        t = type(v)
        if t is list:
            return _items(item, v, _EXACT)
        if t is tuple:
            return _items(item, v, _LAX)
        if t in (str, dict, int, float, bool, type(None)):
            raise _bad("list_type", "Input should be a valid list", v)
        raise _Unsure(f"list from {t.__name__}")
    return check


def _tuple(items: tuple, variadic: bool) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        t = type(v)
        if t not in (tuple, list):
            if t in (str, dict, int, float, bool, type(None)):
                raise _bad("tuple_type", "Input should be a valid tuple", v)
            raise _Unsure(f"tuple from {t.__name__}")
        if variadic:
            got, ex = _items(items[0], v, _EXACT if t is tuple else _LAX)
            return tuple(got), ex
        if len(v) != len(items):
            raise _Unsure("a tuple of the wrong length")  # pydantic's too_short/too_long details
        out, errors, worst = [], [], _EXACT if t is tuple else _LAX
        for i, (check_one, x) in enumerate(zip(items, v, strict=True)):
            try:
                got, ex = check_one(x)
                out.append(got)
                worst = min(worst, ex)
            except _Invalid as exc:
                errors += _prefix(exc.errors, i)
        if errors:
            raise _Invalid(errors)
        return tuple(out), worst
    return check


def _dict(key: Any, value: Any) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        t = type(v)
        if t is not dict:
            if t in (str, list, tuple, int, float, bool, type(None)):
                raise _bad("dict_type", "Input should be a valid dictionary", v)
            raise _Unsure(f"dict from {t.__name__}")
        out, errors, worst = {}, [], _EXACT
        for k, x in v.items():
            try:
                kk, ex1 = key(k)
            except _Invalid as exc:
                errors += _prefix([{**e, "loc": ("[key]", *e["loc"])} for e in exc.errors], k)
                continue
            try:
                got, ex2 = value(x)
            except _Invalid as exc:
                errors += _prefix(exc.errors, k)
                continue
            out[kk] = got
            worst = min(worst, ex1, ex2)
        if errors:
            raise _Invalid(errors)
        return out, worst
    return check


def _tag(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__name__
    return getattr(tp, "__name__", None) or repr(tp)


def _union(members: list[tuple[str, Any]], left_to_right: bool) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        results, errors, declined = [], [], False
        for tag, member in members:
            try:
                got, ex = member(v)
            except _Invalid as exc:
                errors += _prefix(exc.errors, tag)
                continue
            except _Unsure:
                if left_to_right and not results:
                    raise
                declined = True
                continue
            if left_to_right or ex == _EXACT:
                return got, ex
            results.append((got, ex))
        if results and not declined:
            best = max(ex for _g, ex in results)
            top = [g for g, ex in results if ex == best]
            if len(top) == 1:
                return top[0], best
            raise _Unsure("several union members fit equally")
        if declined:
            raise _Unsure("a union member could not be judged")
        raise _Invalid(errors)
    return check


def _constrained(inner: Any, info: FieldInfo) -> Any:
    rules = info.constraints()
    if not rules:
        return inner

    def check(v: Any) -> tuple[Any, int]:
        got, ex = inner(v)
        if type(got) not in (int, float) or (type(got) is float and math.isnan(got)):
            raise _Unsure("a constraint on a non-number")
        for name, bound in rules.items():
            ok = {"ge": got >= bound, "gt": got > bound, "le": got <= bound, "lt": got < bound}[name]
            if not ok:
                kind = {"ge": "greater_than_equal", "gt": "greater_than", "le": "less_than_equal", "lt": "less_than"}
                raise _bad(kind[name], f"Input should be {name} {bound}", v)
        return got, ex
    return check


def _before(func: Any, inner: Any) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        try:
            v = func(v)
        except (ValueError, AssertionError) as exc:
            raise _bad("value_error", f"Value error, {exc}", v) from None
        return inner(v)
    return check


def _model(cls: type[BaseModel]) -> Any:
    def check(v: Any) -> tuple[Any, int]:
        if type(v) is cls:
            return v, _EXACT
        if type(v) is dict:
            return cls._lite_from_dict(v), _STRICT
        if isinstance(v, BaseModel | dict):
            raise _Unsure(f"{cls.__name__} from {type(v).__name__}")
        if type(v) in (str, list, tuple, int, float, bool, type(None)):
            raise _bad("model_type", f"Input should be a valid dictionary or instance of {cls.__name__}", v)
        raise _Unsure(f"{cls.__name__} from {type(v).__name__}")
    return check


_SCALARS = {str: _v_str, int: _v_int, float: _v_float, bool: _v_bool, type(None): _v_none, datetime: _v_datetime,
            date: _v_date, Any: _v_any}


def _split(tp: Any) -> tuple[Any, list]:
    """(the type, its Annotated metadata, outermost last)."""
    meta: list = []
    while typing.get_origin(tp) is typing.Annotated:
        meta = [*meta, *tp.__metadata__]
        tp = tp.__origin__
    return tp, meta


def _validator(tp: Any, union_mode: str | None = None) -> Any:
    """The validator of an annotation; :class:`LiteUnsupported` for a shape not implemented here."""
    tp, meta = _split(tp)
    befores, infos = [], []
    for m in meta:
        if isinstance(m, BeforeValidator):
            befores.append(m.func)
        elif isinstance(m, FieldInfo):
            if m.default is not _MISSING or m.default_factory is not None:
                raise LiteUnsupported("a default inside Annotated")
            infos.append(m)
        else:
            raise LiteUnsupported(f"Annotated metadata {m!r}")
    mode = union_mode
    for info in infos:
        mode = info.union_mode or mode
    check = _core(tp, mode)
    for info in infos:
        check = _constrained(check, info)
    for func in befores:  # the last-listed runs first (pydantic's order); one per annotation here
        check = _before(func, check)
    return check


def _core(tp: Any, union_mode: str | None) -> Any:
    if tp in _SCALARS:
        return _SCALARS[tp]
    if tp is None:
        return _v_none
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        members = [(_tag(a), _validator(a)) for a in args]
        return _union(members, union_mode == "left_to_right")
    if union_mode is not None:
        raise LiteUnsupported(f"union_mode on {tp!r}")
    if origin is typing.Literal:
        return _literal(args)
    if origin is list and len(args) == 1:
        return _list(_validator(args[0]))
    if origin is dict and len(args) == 2:
        if _split(args[0])[0] is not str:
            raise LiteUnsupported(f"dict keys of {args[0]!r}")
        return _dict(_validator(args[0]), _validator(args[1]))
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple((_validator(args[0]),), True)
        if Ellipsis in args:
            raise LiteUnsupported(f"{tp!r}")
        return _tuple(tuple(_validator(a) for a in args), False)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _model(tp)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum(tp)
    raise LiteUnsupported(f"annotation {tp!r} not implemented")


# --------------------------------------------------------------------------- serialisers by type
# each takes (value, json mode) and returns the dumped value, or _MISMATCH when the value is not of
# the declared type (pydantic then warns and infers; here: infer when warnings are off, else decline)

_MISMATCH = object()


def _datetime_text(v: datetime) -> str:
    off = v.utcoffset()
    if off is not None and off % timedelta(minutes=1):
        raise LiteDeclined("a UTC offset with seconds")
    text = v.isoformat()
    if off is not None and not off:
        text = text[: -len("+00:00")] + "Z"
    return text


def _infer(v: Any, js: bool, warn: bool) -> Any:
    """pydantic's serialisation of a value of unknown type (``Any``, or after a type mismatch)."""
    t = type(v)
    if v is None or t in (str, int, float, bool):
        return v
    if isinstance(v, BaseModel):
        return v._lite_dump(js, None, None, warn)
    if isinstance(v, Enum):
        return _infer(v.value, js, warn) if js else v
    if t is list:
        return [_infer(x, js, warn) for x in v]
    if t is tuple:
        return [_infer(x, js, warn) for x in v] if js else tuple(_infer(x, js, warn) for x in v)
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str and not (js and type(k) is int):
                raise LiteDeclined(f"a dict key of type {type(k).__name__}")
            out[str(k) if js else k] = _infer(x, js, warn)
        return out
    if t is datetime:
        return _datetime_text(v) if js else v
    if t is date:
        return v.isoformat() if js else v
    raise LiteDeclined(f"serialising a {t.__name__}")


def _s_scalar(kind: type) -> Any:
    def ser(v: Any, js: bool, warn: bool) -> Any:
        return v if type(v) is kind else _MISMATCH
    return ser


def _s_float(v: Any, js: bool, warn: bool) -> Any:
    t = type(v)
    if t is float:
        return v
    if t is int:
        return float(v) if js else v
    return _MISMATCH


def _s_none(v: Any, js: bool, warn: bool) -> Any:
    return None if v is None else _MISMATCH


def _s_any(v: Any, js: bool, warn: bool) -> Any:
    return _infer(v, js, warn)


def _s_datetime(v: Any, js: bool, warn: bool) -> Any:
    if type(v) is not datetime:
        return _MISMATCH
    return _datetime_text(v) if js else v


def _s_date(v: Any, js: bool, warn: bool) -> Any:
    if type(v) is not date:
        return _MISMATCH
    return v.isoformat() if js else v


_SCALAR_SER = {str: _s_scalar(str), int: _s_scalar(int), bool: _s_scalar(bool), float: _s_float,
               type(None): _s_none, Any: _s_any, datetime: _s_datetime, date: _s_date}


def _field_ser(inner: Any) -> Any:
    """A field's serialiser: a mismatch infers when warnings are off (pydantic's fallback), else declines."""
    def ser(v: Any, js: bool, warn: bool) -> Any:
        got = inner(v, js, warn)
        if got is _MISMATCH:
            if warn:
                raise LiteDeclined("a value that does not match its field's type (pydantic warns)")
            return _infer(v, js, warn)
        return got
    return ser


def _serializer(tp: Any) -> Any:
    tp, _meta = _split(tp)
    if tp in _SCALAR_SER:
        return _SCALAR_SER[tp]
    if tp is None:
        return _s_none
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        members = [_serializer(a) for a in args]
        strict = [(a, m) for a, m in zip(args, members, strict=True)]

        def ser_union(v: Any, js: bool, warn: bool) -> Any:
            for _a, m in strict:
                got = m(v, js, warn)
                if got is not _MISMATCH:
                    return got
            return _MISMATCH
        if any(_split(a)[0] is float for a in args) and any(_split(a)[0] is int for a in args):
            raise LiteUnsupported(f"{tp!r}: a union of int and float")
        return ser_union
    if origin is typing.Literal:
        values = args

        def ser_literal(v: Any, js: bool, warn: bool) -> Any:
            return v if any(type(v) is type(x) and v == x for x in values) else _MISMATCH
        return ser_literal
    if origin is list:
        item = _field_ser(_serializer(args[0]))

        def ser_list(v: Any, js: bool, warn: bool) -> Any:
            if type(v) is not list:
                return _MISMATCH
            return [item(x, js, warn) for x in v]
        return ser_list
    if origin is tuple:
        items = [_field_ser(_serializer(a)) for a in (args[:1] if args[-1] is Ellipsis else args)]
        variadic = args[-1] is Ellipsis

        def ser_tuple(v: Any, js: bool, warn: bool) -> Any:
            if type(v) is not tuple or (not variadic and len(v) != len(items)):
                return _MISMATCH
            out = [(items[0] if variadic else items[i])(x, js, warn) for i, x in enumerate(v)]
            return out if js else tuple(out)
        return ser_tuple
    if origin is dict:
        value = _field_ser(_serializer(args[1]))

        def ser_dict(v: Any, js: bool, warn: bool) -> Any:
            if type(v) is not dict or any(type(k) is not str for k in v):
                return _MISMATCH
            return {k: value(x, js, warn) for k, x in v.items()}
        return ser_dict
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        def ser_model(v: Any, js: bool, warn: bool) -> Any:
            return v._lite_dump(js, None, None, warn) if type(v) is tp else _MISMATCH
        return ser_model
    if isinstance(tp, type) and issubclass(tp, Enum):
        def ser_enum(v: Any, js: bool, warn: bool) -> Any:
            if type(v) is not tp:
                return _MISMATCH
            return v.value if js else v
        return ser_enum
    raise LiteUnsupported(f"serialising {tp!r}")


# --------------------------------------------------------------------------- JSON text

_ESCAPE = re.compile(r'[\x00-\x1f\\"]')
_SHORT = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(s: str) -> str:
    return '"' + _ESCAPE.sub(lambda m: _SHORT.get(m.group(0)) or f"\\u{ord(m.group(0)):04x}", s) + '"'


def float_text(v: float) -> str:
    """A float as pydantic-core writes it in JSON (Python's repr, ``e-7``/``e+20`` exponents, 1e-5 in full)."""
    if not math.isfinite(v):
        return "null"
    r = repr(v)
    if "e" not in r:
        return r
    mant, _e, exp = r.partition("e")
    ex = int(exp)
    if ex == -5:
        neg = mant.startswith("-")
        return ("-" if neg else "") + "0.0000" + mant.lstrip("-").replace(".", "")
    return f"{mant}e{'+' if ex > 0 else '-'}{abs(ex)}"


def _encode(o: Any, indent: int | None, level: int, out: list[str]) -> None:
    t = type(o)
    if o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif t is int:
        out.append(str(o))
    elif t is float:
        out.append(float_text(o))
    elif t is str:
        out.append(_string(o))
    elif t is list:
        if not o:
            out.append("[]")
            return
        if indent is None:
            out.append("[")
            for i, x in enumerate(o):
                if i:
                    out.append(",")
                _encode(x, None, 0, out)
            out.append("]")
            return
        inner = "\n" + " " * (indent * (level + 1))
        out.append("[")
        for i, x in enumerate(o):
            out.append(("," if i else "") + inner)
            _encode(x, indent, level + 1, out)
        out.append("\n" + " " * (indent * level) + "]")
    elif t is dict:
        if not o:
            out.append("{}")
            return
        sep = ":" if indent is None else ": "
        inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
        out.append("{")
        for i, (k, x) in enumerate(o.items()):
            out.append(("," if i else "") + inner + _string(k) + sep)
            _encode(x, indent, level + 1, out)
        out.append("" if indent is None else "\n" + " " * (indent * level))
        out.append("}")
    else:
        raise LiteDeclined(f"JSON of a {t.__name__}")


# --------------------------------------------------------------------------- the model

class _Meta(type):
    @property
    def model_fields(cls) -> dict[str, FieldInfo]:
        cls._lite_build()
        return cls.__lite_fields__


MODEL_API = frozenset({"model_dump", "model_dump_json", "model_validate", "model_copy", "model_construct",
                       "model_fields", "model_fields_set", "model_post_init", "model_validate_json",
                       "model_json_schema", "model_computed_fields", "model_extra", "model_rebuild"})


class BaseModel(metaclass=_Meta):
    """The subset of pydantic's ``BaseModel`` the quick path's models use (see the module's doc)."""

    __slots__ = ("__dict__", "__weakref__", "__lite_set__")

    __lite_own__: dict[str, FieldInfo] = {}
    __lite_fields__: dict[str, FieldInfo] = {}
    __lite_built__ = False
    model_config: dict = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        if kw:
            raise LiteUnsupported(f"class keywords {sorted(kw)}")
        super().__init_subclass__()
        ns = cls.__dict__
        config: dict = {}
        for base in reversed(cls.__mro__[1:]):
            config.update(getattr(base, "model_config", {}) or {})
        config.update(ns.get("model_config", {}))
        ConfigDict(**config)
        cls.model_config = config
        own: dict[str, FieldInfo] = {}
        for name in ns.get("__annotations__", {}):
            if name.startswith("_") or name == "model_config":
                raise LiteUnsupported(f"{cls.__name__}.{name}: private or config annotations")
            value = ns.get(name, _MISSING)
            info = value if isinstance(value, FieldInfo) else FieldInfo(value)
            own[name] = info
            if value is not _MISSING:
                delattr(cls, name)  # pydantic keeps no class attribute for a field
        decos: list[_Decorator] = []
        for base in reversed(cls.__mro__[1:]):
            decos += [d for d in base.__dict__.get("__lite_decorators__", ())]
        for name, value in list(ns.items()):
            if isinstance(value, _Decorator):
                decos.append(value)
                setattr(cls, name, value.func)
        for name in ns:
            if name in MODEL_API or name.startswith("__pydantic"):
                raise LiteUnsupported(f"{cls.__name__}.{name} overrides the model API")
        cls.__lite_own__ = own
        cls.__lite_decorators__ = tuple(decos)
        cls.__lite_built__ = False

    # ---- building (first use; forward references resolve by then)
    @classmethod
    def _lite_build(cls) -> None:
        if cls.__dict__.get("__lite_built__"):
            return
        with _BUILD_LOCK:  # probe threads validate concurrently: one build per class, never a half-built one
            if not cls.__dict__.get("__lite_built__"):
                cls._lite_build_locked()

    @classmethod
    def _lite_build_locked(cls) -> None:
        fields: dict[str, FieldInfo] = {}
        full: dict[str, Any] = {}  # field -> its annotation with Annotated metadata (FieldInfo keeps it stripped)
        for base in reversed(cls.__mro__):
            if base is BaseModel or not issubclass(base, BaseModel):
                continue
            if base.__dict__.get("__lite_own__"):
                module = sys.modules[base.__module__].__dict__
                raw = base.__dict__.get("__annotations__", {})
                for name, info in base.__dict__["__lite_own__"].items():
                    hint = raw[name]
                    tp = eval(hint, module, dict(vars(base))) if isinstance(hint, str) else hint  # noqa: S307
                    fields[name] = info
                    full[name] = tp
        validators, serializers = {}, {}
        for name, info in fields.items():
            validators[name] = _constrained(_validator(full[name], info.union_mode), info)
            serializers[name] = _field_ser(_serializer(full[name]))
            info.annotation = _split(full[name])[0]  # as pydantic's FieldInfo.annotation: Annotated stripped
        after_field: dict[str, list] = {}
        before_model, after_model = [], []
        for d in cls.__lite_decorators__:
            if d.kind == "field":
                for f in d.fields:
                    if f not in fields:
                        raise LiteUnsupported(f"{cls.__name__}: field_validator for unknown field {f}")
                    after_field.setdefault(f, []).append(d.func)
            elif d.mode == "before":
                before_model.append(d.func)
            else:
                after_model.append(d.func)
        cls.__lite_fields__ = fields
        cls.__lite_validators__ = validators
        cls.__lite_serializers__ = serializers
        cls.__lite_after_field__ = after_field
        cls.__lite_before_model__ = before_model
        cls.__lite_after_model__ = after_model
        cls.__lite_forbid__ = cls.model_config.get("extra", "ignore") == "forbid"
        cls.__lite_frozen__ = bool(cls.model_config.get("frozen"))
        cls.__lite_built__ = True

    # ---- validation
    @classmethod
    def _lite_from_dict(cls, data: Any) -> BaseModel:
        cls._lite_build()
        for func in cls.__lite_before_model__:
            fn = func.__func__ if isinstance(func, classmethod) else func
            try:
                data = fn(cls, data)
            except (ValueError, AssertionError) as exc:
                raise _bad("value_error", f"Value error, {exc}", data) from None
        if type(data) is not dict:
            if isinstance(data, cls):
                return data
            raise _Unsure(f"{cls.__name__} from {type(data).__name__} after its before-validator")
        values: dict[str, Any] = {}
        errors: list[dict] = []
        fields_set = set()
        for name, info in cls.__lite_fields__.items():
            if name in data:
                try:
                    got, _ex = cls.__lite_validators__[name](data[name])
                    for func in cls.__lite_after_field__.get(name, ()):
                        fn = func.__func__ if isinstance(func, classmethod) else func
                        try:
                            got = fn(cls, got)
                        except (ValueError, AssertionError) as exc:
                            raise _bad("value_error", f"Value error, {exc}", got) from None
                    values[name] = got
                    fields_set.add(name)
                except _Invalid as exc:
                    errors += _prefix(exc.errors, name)
            elif info.default_factory is not None:
                values[name] = info.default_factory()
            elif info.default is not _MISSING:
                values[name] = _copy_default(info.default)
            else:
                errors.append({"type": "missing", "loc": (name,), "msg": "Field required", "input": data})
        if cls.__lite_forbid__:
            errors += [{"type": "extra_forbidden", "loc": (k,), "msg": "Extra inputs are not permitted",
                        "input": data[k]} for k in data if k not in cls.__lite_fields__]
        if errors:
            raise _Invalid(errors)
        self = object.__new__(cls)
        object.__setattr__(self, "__dict__", values)
        object.__setattr__(self, "__lite_set__", fields_set)
        for func in cls.__lite_after_model__:
            try:
                self = func(self)
            except (ValueError, AssertionError) as exc:
                raise _bad("value_error", f"Value error, {exc}", data) from None
        return self

    @classmethod
    def model_validate(cls, obj: Any, **kw: Any) -> Any:
        if kw:
            raise LiteDeclined(f"model_validate options {sorted(kw)}")
        cls._lite_build()
        try:
            if isinstance(obj, cls):
                return obj
            if type(obj) is not dict and not cls.__lite_before_model__:
                return _model(cls)(obj)[0]
            return cls._lite_from_dict(obj)
        except _Invalid as exc:
            raise _error(cls, exc.errors) from None
        except _Unsure as exc:
            raise LiteDeclined(f"{cls.__name__}: {exc}") from None

    def __init__(self, **data: Any) -> None:
        cls = type(self)
        try:
            got = cls._lite_from_dict(data)
        except _Invalid as exc:
            raise _error(cls, exc.errors) from None
        except _Unsure as exc:
            raise LiteDeclined(f"{cls.__name__}: {exc}") from None
        object.__setattr__(self, "__dict__", got.__dict__)
        object.__setattr__(self, "__lite_set__", got.__lite_set__)

    @classmethod
    def model_construct(cls, _fields_set: Any = None, **values: Any) -> Any:
        cls._lite_build()
        out: dict[str, Any] = {}
        for name, info in cls.__lite_fields__.items():
            if name in values:
                out[name] = values[name]
            elif info.default_factory is not None:
                out[name] = info.default_factory()
            elif info.default is not _MISSING:
                out[name] = _copy_default(info.default)
        self = object.__new__(cls)
        object.__setattr__(self, "__dict__", out)
        object.__setattr__(self, "__lite_set__", set(values) if _fields_set is None else set(_fields_set))
        return self

    # ---- copying, attributes, comparison
    def model_copy(self, *, update: dict | None = None, deep: bool = False) -> Any:
        if deep:
            raise LiteDeclined("model_copy(deep=True)")
        new = object.__new__(type(self))
        values = dict(self.__dict__)
        fields_set = set(self.__lite_set__)
        if update:
            values.update(update)
            fields_set |= set(update)
        object.__setattr__(new, "__dict__", values)
        object.__setattr__(new, "__lite_set__", fields_set)
        return new

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        cls._lite_build()
        if cls.__lite_frozen__:
            raise _error(cls, [{"type": "frozen_instance", "loc": (name,), "msg": "Instance is frozen",
                                "input": value}])
        if name not in cls.__lite_fields__:
            raise ValueError(f'"{cls.__name__}" object has no field "{name}"')
        self.__dict__[name] = value
        self.__lite_set__.add(name)

    def __delattr__(self, name: str) -> None:
        raise LiteDeclined("deleting a model attribute")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BaseModel):
            return type(self) is type(other) and self.__dict__ == other.__dict__
        return NotImplemented

    def __hash__(self) -> int:
        cls = type(self)
        cls._lite_build()
        if not cls.__lite_frozen__:
            raise TypeError(f"unhashable type: '{cls.__name__}'")
        return hash(tuple(self.__dict__.values()))

    def __iter__(self) -> Any:
        yield from self.__dict__.items()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __str__(self) -> str:
        return " ".join(f"{k}={v!r}" for k, v in self.__dict__.items())

    def __copy__(self) -> Any:
        return self.model_copy()

    def __deepcopy__(self, memo: dict | None = None) -> Any:
        new = object.__new__(type(self))
        object.__setattr__(new, "__dict__", copy.deepcopy(self.__dict__, memo))
        object.__setattr__(new, "__lite_set__", set(self.__lite_set__))
        return new

    @property
    def model_fields_set(self) -> set[str]:
        return set(self.__lite_set__)

    # ---- serialisation
    def _lite_dump(self, js: bool, include: Any, exclude: Any, warn: bool) -> dict:
        cls = type(self)
        cls._lite_build()
        out = {}
        for name, ser in cls.__lite_serializers__.items():
            if include is not None and name not in include:
                continue
            if exclude is not None and name in exclude:
                continue
            if name not in self.__dict__:
                raise LiteDeclined(f"{cls.__name__}.{name} is not set")
            out[name] = ser(self.__dict__[name], js, warn)
        return out

    def model_dump(self, *, mode: str = "python", include: Any = None, exclude: Any = None,
                   warnings: bool = True, **kw: Any) -> dict:
        if kw or mode not in ("python", "json"):
            raise LiteDeclined(f"model_dump options {sorted(kw)} mode={mode!r}")
        return self._lite_dump(mode == "json", _names(include), _names(exclude), bool(warnings))

    def model_dump_json(self, *, indent: int | None = None, include: Any = None, exclude: Any = None,
                        warnings: bool = True, **kw: Any) -> str:
        if kw:
            raise LiteDeclined(f"model_dump_json options {sorted(kw)}")
        data = self._lite_dump(True, _names(include), _names(exclude), bool(warnings))
        out: list[str] = []
        _encode(data, indent, 0, out)
        return "".join(out)


def _names(spec: Any) -> set[str] | None:
    if spec is None:
        return None
    if isinstance(spec, set | frozenset) and all(type(x) is str for x in spec):
        return set(spec)
    raise LiteDeclined("include/exclude other than a set of field names")


def _copy_default(value: Any) -> Any:
    if type(value) in (list, dict, set) and value:
        return copy.deepcopy(value)
    if type(value) in (list, dict, set):
        return type(value)()
    return value


def _error(cls: type, errors: list[dict]) -> Exception:
    if DECLINE_ON_ERROR:
        return LiteDeclined(f"a validation error for {cls.__name__}: {errors[:3]!r}")
    return ValidationError(cls.__name__, errors)


__all__ = ["BaseModel", "BeforeValidator", "ConfigDict", "Field", "FieldInfo", "LiteDeclined", "LiteUnsupported",
           "ValidationError", "field_validator", "model_validator"]
