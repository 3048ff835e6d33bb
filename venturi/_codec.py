"""JSON encoding of task payloads and their typed decoding back into tasks.

Payloads cross the store boundary as JSON text (bound as a parameter and cast
to jsonb), so no codec has to be configured on a caller's connection. The
supported field types are the ones that survive a JSON round trip without
guessing: JSON scalars, lists, string-keyed dicts, datetime/date, UUID, Enum
and nested dataclasses, optionally wrapped in ``X | None`` / unions / Literal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from .errors import InvalidJob, PayloadDecodeError, TaskDefinitionError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# An escaped NUL (``\u0000`` not itself escaped), looked for in the text: a test on
# ``str`` costs a tenth of the same test on orjson's ``bytes`` (which goes through
# the buffer protocol), and the text is what the driver binds.
_NUL = re.compile(r'(?<!\\)(?:\\\\)*\\u0000')
_OPTIONS = orjson.OPT_NON_STR_KEYS
_orjson_dumps = orjson.dumps


def dumps(value: Any, what: str = "payload") -> str:
    """Encode a JSON-able value (dataclasses included) to text for a jsonb bind.

    Raises ``InvalidJob`` for anything PostgreSQL's jsonb cannot store: values
    orjson cannot encode, lone surrogates, and NUL characters; its message names
    the value as ``what``.
    """
    try:
        text: str = _orjson_dumps(value, option=_OPTIONS).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise InvalidJob(f"{what} is not JSON-serializable ({_first_line(exc)})") from None
    if "\\u0000" in text and _NUL.search(text):
        raise InvalidJob(f"{what} contains a NUL character, which jsonb cannot store")
    # orjson writes NaN and Infinity as null: refuse them rather than lose the value.
    if "null" in text and _has_nonfinite(value):
        raise InvalidJob(f"{what} contains NaN or Infinity, which JSON cannot store")
    return text


def dumps_many(values: Sequence[Any], what: str = "payload") -> list[str]:
    """``[dumps(v) for v in values]``, the checks made once over all of the text
    rather than per value (enqueue_many: they cost as much as the encoding). Raises
    ``InvalidJob`` as ``dumps`` would for the first value it refuses. Each document is
    decoded as soon as it is made: 50,000 of orjson's bytes kept alive at once made
    the encoding ten times slower."""
    try:
        texts = [orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode() for v in values]
    except (orjson.JSONEncodeError, TypeError):
        return [dumps(v, what) for v in values]  # raises, naming the problem
    text = "".join(texts)  # an escape never spans two documents
    if "\\u0000" in text and _NUL.search(text):
        return [dumps(v, what) for v in values]
    if "null" in text:
        for v, t in zip(values, texts, strict=True):
            if "null" in t and _has_nonfinite(v):
                dumps(v, what)  # raises
    return texts


def json_has_nul(text: str) -> bool:
    """Whether JSON text holds a NUL character, raw or escaped (jsonb refuses both)."""
    return "\x00" in text or ("\\u0000" in text and _NUL.search(text) is not None)


def _has_nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, Mapping):
        return any(_has_nonfinite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nonfinite(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_has_nonfinite(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def check_size(text: str, limit: int, what: str = "payload") -> None:
    # A character is at most 4 UTF-8 bytes: only text that might be over is encoded.
    if len(text) * 4 > limit and len(text.encode()) > limit:
        hint = "enqueue" if what == "payload" else "return"
        raise InvalidJob(
            f"{what} is {len(text.encode())} bytes, over the {limit}-byte limit "
            f"(store large data elsewhere and {hint} a reference to it)"
        )


def loads(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


# --- typed decoding -----------------------------------------------------------

Converter = Callable[[Any], Any]
_SCALARS: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
}


class _Mismatch(Exception):
    pass


def converter_for(tp: Any, where: str) -> Converter:
    """Build a function that turns decoded JSON into ``tp``, or raise
    ``TaskDefinitionError`` when ``tp`` cannot round-trip through JSON."""
    if tp is Any:
        return lambda v: v
    if tp is None or tp is type(None):
        def none(v: Any) -> None:
            if v is not None:
                raise _Mismatch
            return None
        return none
    if tp in _SCALARS:
        accepted = _SCALARS[tp]
        exact_bool = tp is bool

        def scalar(v: Any) -> Any:
            if not isinstance(v, accepted) or (not exact_bool and isinstance(v, bool)):
                raise _Mismatch
            return float(typing.cast(float, v)) if tp is float else v  # int is fine for float
        return scalar
    if tp is dt.datetime:
        return lambda v: _parse(v, dt.datetime.fromisoformat)
    if tp is dt.date:
        return lambda v: _parse(v, dt.date.fromisoformat)
    if tp is uuid.UUID:
        return lambda v: _parse(v, uuid.UUID)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def to_enum(v: Any) -> Any:
            try:
                return tp(v)
            except ValueError:
                raise _Mismatch from None
        return to_enum
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return dataclass_converter(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        item = converter_for(args[0] if args else Any, where)
        container = list if origin is list else tuple

        def seq(v: Any) -> Any:
            if not isinstance(v, list):
                raise _Mismatch
            return container(item(x) for x in v)
        return seq
    if origin is dict:
        if args and args[0] is not str:
            raise TaskDefinitionError(f"{where}: dict keys must be str, got {args[0]!r}")
        value = converter_for(args[1] if args else Any, where)

        def mapping(v: Any) -> Any:
            if not isinstance(v, dict):
                raise _Mismatch
            return {k: value(x) for k, x in v.items()}
        return mapping
    if origin in (typing.Union, types.UnionType):
        options = [converter_for(a, where) for a in args]

        def union(v: Any) -> Any:
            for option in options:
                try:
                    return option(v)
                except _Mismatch:
                    continue
            raise _Mismatch
        return union
    if origin is typing.Literal:
        allowed = set(args)

        def literal(v: Any) -> Any:
            if v not in allowed:
                raise _Mismatch
            return v
        return literal
    raise TaskDefinitionError(
        f"{where}: type {tp!r} does not round-trip through JSON; use JSON types, "
        "datetime, date, UUID, Enum or a dataclass"
    )


def _parse(v: Any, parse: Callable[[str], Any]) -> Any:
    if not isinstance(v, str):
        raise _Mismatch
    try:
        return parse(v)
    except ValueError:
        raise _Mismatch from None


_DATACLASS_CONVERTERS: dict[type, Converter] = {}


def dataclass_converter(cls: type) -> Converter:
    cached = _DATACLASS_CONVERTERS.get(cls)
    if cached is not None:
        return cached
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # unresolvable forward reference
        raise TaskDefinitionError(
            f"{cls.__qualname__}: cannot resolve field types ({exc})"
        ) from None
    fields = [f for f in dataclasses.fields(cls) if f.init]
    convs = {f.name: converter_for(hints[f.name], f"{cls.__qualname__}.{f.name}") for f in fields}
    required = {
        f.name for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def build(v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise _Mismatch
        unknown = v.keys() - convs.keys()
        if unknown:
            raise PayloadDecodeError("payload-unknown-field", f"unknown field(s) {sorted(unknown)}")
        missing = required - v.keys()
        if missing:
            raise PayloadDecodeError("payload-missing-field", f"missing field(s) {sorted(missing)}")
        kwargs = {}
        for name, raw in v.items():
            try:
                kwargs[name] = convs[name](raw)
            except _Mismatch:
                raise PayloadDecodeError(
                    "payload-type-mismatch", f"field {name!r} has the wrong type"
                ) from None
        return cls(**kwargs)

    _DATACLASS_CONVERTERS[cls] = build
    return build


def decode_into(cls: type, payload: Any) -> Any:
    """Decode a stored payload into an instance of the dataclass ``cls``."""
    try:
        return dataclass_converter(cls)(payload)
    except _Mismatch:
        raise PayloadDecodeError("payload-not-an-object", "payload is not a JSON object") from None
    except PayloadDecodeError:
        raise
    except (TypeError, ValueError) as exc:  # __post_init__ validation and the like
        raise PayloadDecodeError("payload-invalid", type(exc).__name__) from None
