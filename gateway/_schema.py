"""TOML data to frozen dataclasses through pydantic, with every problem named by its key.

pydantic validates the stdlib dataclasses of :mod:`gateway.config` (``TypeAdapter``, strict
JSON mode, so TOML's types are kept: no "5" for a number, no 1 for true); this module walks
the data first to replace ``${VAR}`` from the environment, and afterwards turns pydantic's
errors into ours: a key path (``model.fallbacks[0].timeout_s``) and words that say what is
expected and what was given, never the value itself (it may be a secret from ``${VAR}``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

Check = Callable[[Any], str | None]
Problem = tuple[str, str]  # (key path, message)
# Every table refuses keys it does not name (the path is reported, not ignored).
TABLE = ConfigDict(extra="forbid")
# The metadata of a secret field (and of the items of a list of them).
SECRET: Mapping[str, bool] = {"secret": True}


def rule(check: Check) -> AfterValidator:
    """An ``Annotated`` constraint from a check that returns what is wrong, or None."""

    def validate(value: Any) -> Any:
        problem = check(value)
        if problem:
            raise problem_error(problem)
        return value

    return AfterValidator(validate)


def problem_error(problem: str) -> PydanticCustomError:
    """An error of ours inside pydantic's validation, reported at the key being validated."""
    return PydanticCustomError("botmux", "{problem}", {"problem": problem})


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_INTEGER = re.compile(r"-?[0-9]+")
_Loc = tuple[str | int, ...]
_Problems = list[tuple[_Loc, str]]
_T = typing.TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Expanded:
    """A string of the file that named environment variables, and how they were found."""

    loc: _Loc
    names: tuple[str, ...]
    unset: tuple[str, ...]
    empty: tuple[str, ...]


def _expand(value: Any, loc: _Loc, env: Mapping[str, str] | None, found: list[_Expanded]) -> Any:
    """``value`` with each ``${VAR}`` replaced (an unset one by nothing: ``found`` says so).
    TOML dates and times become null: no field takes one, and JSON has none."""
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), env, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), env, found) for i, v in enumerate(value)]
    if env is not None and isinstance(value, str) and _VAR.search(value):
        names = tuple(_VAR.findall(value))
        unset = tuple(n for n in names if n not in env)
        empty = tuple(n for n in names if env.get(n) == "")
        found.append(_Expanded(loc, names, unset, empty))
        return _VAR.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, datetime.date | datetime.time):
        return None
    return value


def _bare(tp: Any) -> Any:
    """The type without ``Annotated`` constraints and without ``| None``."""
    while True:
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) in (types.UnionType, typing.Union):
            (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        else:
            return tp


def _walk(root: Any, loc: _Loc) -> tuple[Any, dataclasses.Field[Any] | None]:
    """The type at ``loc`` (None when no field is there) and the last field on the way."""
    tp, last = root, None
    for part in loc:
        tp = _bare(tp)
        if isinstance(part, int) and typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
        elif isinstance(part, str) and dataclasses.is_dataclass(tp):
            fields = {f.name: f for f in dataclasses.fields(tp)}
            if part not in fields:
                return None, None
            tp, last = typing.get_type_hints(tp, include_extras=True)[part], fields[part]
        else:
            return None, None
    return _bare(tp), last


_SINGULAR = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
_PLURAL = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is tuple:
        item = _bare(typing.get_args(tp)[0])
        return f"a list of {'tables' if dataclasses.is_dataclass(item) else _PLURAL.get(item)}"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return _SINGULAR.get(tp, str(tp))


def _kind(value: Any) -> str:
    """What was given, never the value itself (it may be a secret)."""
    if isinstance(value, bool):
        return "true or false"
    for kind, name in ((int, "an integer"), (float, "a number"), (str, "a string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, list):
        return "a list"
    return "a table" if isinstance(value, dict) else "a date or time"  # the only null


def _message(error: ErrorDetails, root: Any, expanded: _Expanded | None) -> str:
    """Our words for one of pydantic's errors."""
    loc, kind, ctx = tuple(error["loc"]), error["type"], error.get("ctx") or {}
    tp, _ = _walk(root, loc)
    if kind == "botmux":
        text = str(ctx["problem"])
    elif kind == "missing":
        text = "is required"
    elif kind == "literal_error" and typing.get_origin(tp) is typing.Literal:
        choices = typing.get_args(tp)
        if isinstance(error["input"], type(choices[0])):
            text = f"must be one of {', '.join(map(repr, choices))}"
        else:  # a value of another type: said as for any other key
            text = f"must be {_type_name(type(choices[0]))}, got {_kind(error['input'])}"
    elif kind == "unexpected_keyword_argument":
        table, _ = _walk(root, loc[:-1])
        fields = dataclasses.fields(table) if dataclasses.is_dataclass(table) else ()
        known = sorted(f.name for f in fields if not f.metadata.get("internal"))
        text = f"unknown key (known here: {', '.join(known)})"
    elif kind == "greater_than":
        text = f"must be greater than {ctx['gt']:g}"
    elif kind == "greater_than_equal":
        text = "must be 0 or more" if ctx["ge"] == 0 else f"must be at least {ctx['ge']:g}"
    elif kind == "less_than_equal":
        text = f"must be at most {ctx['le']:g}"
    elif tp is not None and kind.endswith(("_type", "_parsing", "_from_float")):
        text = f"must be {_type_name(tp)}, got {_kind(error['input'])}"
    else:
        text = error["msg"]  # pydantic's words: they name what is expected, not the input
    if expanded is not None and kind != "unexpected_keyword_argument":
        text += " (from " + ", ".join(f"${{{n}}}" for n in expanded.names) + ")"
    return text


def _set(data: Any, loc: _Loc, value: Any) -> None:
    for part in loc[:-1]:
        data = data[part]
    data[loc[-1]] = value


def _validate(
    adapter: TypeAdapter[_T], root: Any, data: dict[str, Any], found: list[_Expanded]
) -> tuple[_T | None, _Problems]:
    """Validate ``data`` as ``root``: the object, or every problem with its key."""
    expanded = {e.loc: e for e in found}
    while True:
        try:
            return adapter.validate_json(json.dumps(data), strict=True), []
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        # "${VAR}" is accepted for an integer (TOML has no other way to take one from the
        # environment); a literal "5" is not. A fix makes an integer of a string: it cannot
        # recur, so this loops twice at most.
        fixes = [
            (tuple(e["loc"]), e["input"].strip())
            for e in errors
            if e["type"] == "int_type"
            and tuple(e["loc"]) in expanded
            and isinstance(e["input"], str)
            and _INTEGER.fullmatch(e["input"].strip())
        ]
        if not fixes:
            break
        for loc, text in fixes:
            _set(data, loc, int(text))
    return None, [
        (tuple(e["loc"]), _message(e, root, expanded.get(tuple(e["loc"])))) for e in errors
    ]


def _variable_problems(root: Any, found: list[_Expanded]) -> _Problems:
    """Unset variables anywhere, and empty ones in a secret (a field with ``SECRET`` metadata)."""
    problems: _Problems = []
    for e in found:
        tp, last = _walk(root, e.loc)
        if tp is None:
            continue  # under a key the schema does not have: that is the problem to report
        problems.extend((e.loc, f"environment variable {name} is not set") for name in e.unset)
        if last is not None and last.metadata.get("secret"):
            problems.extend(
                (e.loc, f"environment variable {name} is empty, and this is a secret")
                for name in e.empty
            )
    return problems


def _path(loc: _Loc, prefix: str = "") -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
    return out


def validate(
    adapter: TypeAdapter[_T],
    root: Any,
    data: dict[str, Any],
    env: Mapping[str, str] | None,
    prefix: str = "",
) -> tuple[_T | None, list[Problem]]:
    """``data`` (from TOML) as a ``root``, or None and every problem, the first of each key.
    With ``env``, each ``${VAR}`` is replaced first; without, strings are taken as they are."""
    found: list[_Expanded] = []
    data = _expand(data, (), env, found)
    problems = _variable_problems(root, found)
    outcome = _validate(adapter, root, data, found)
    value, errors = outcome
    report: dict[str, str] = {}
    for loc, message in problems + errors:
        report.setdefault(_path(loc, prefix), message)  # the first problem of each key
    return (None if report else value), list(report.items())
