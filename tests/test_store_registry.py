"""The store's registry is complete, in the style of the error tables: every write and query a
concern module defines has both functions, each taking that command and returning what the
command declares (mypy checks the same at each ``HANDLERS`` line; this fails when a command is
defined and never registered, or registered with the wrong functions)."""

from __future__ import annotations

import inspect
import typing
from types import ModuleType, UnionType
from typing import Any

import asyncpg
import pytest

from gateway.store import commands
from gateway.store.commands import Query, QueryHandler, Write, WriteHandler
from gateway.store.registry import CONCERNS, REGISTRY


def defined(module: ModuleType) -> list[type[Any]]:
    """The command classes a concern module defines (not the ones it imports)."""
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and issubclass(cls, Write | Query)
    ]


COMMANDS = [cls for module in CONCERNS for cls in defined(module)]


def declared(cls: type[Any]) -> Any:
    """``R`` of ``class X(Write[R])``."""
    (base,) = [b for b in cls.__orig_bases__ if typing.get_origin(b) in (Write, Query)]
    (result,) = typing.get_args(base)
    return result


def members(union: Any) -> set[Any]:
    """The types a union is made of (a type alone: itself); ``None`` as ``NoneType``."""
    found = typing.get_args(union) if typing.get_origin(union) in (typing.Union, UnionType) else ()
    return {type(None) if t is None else t for t in (found or (union,))}


def hints(function: Any) -> dict[str, Any]:
    """The function's annotations, resolved; what the modules import only for mypy is given."""
    module = vars(inspect.getmodule(function))
    given = {"asyncpg": asyncpg, "PgConn": asyncpg.Connection}  # PgConn: a mypy alias
    return typing.get_type_hints(function, {**vars(commands), **module, **given})


def test_every_concern_module_registers_what_it_defines() -> None:
    assert len(COMMANDS) == len(REGISTRY.writes) + len(REGISTRY.queries)
    for module in CONCERNS:
        assert {h.kind for h in module.HANDLERS} == set(defined(module)), module.__name__


@pytest.mark.parametrize("kind", COMMANDS, ids=lambda cls: cls.__name__)
def test_each_command_has_both_functions_typed_for_it(kind: type[Any]) -> None:
    handler = REGISTRY.writer(kind) if issubclass(kind, Write) else REGISTRY._queries[kind]
    assert isinstance(handler, WriteHandler | QueryHandler)
    result = declared(kind)
    for dialect in ("sqlite", "postgres"):
        function = getattr(handler, dialect)
        found = hints(function)
        taken = found[list(inspect.signature(function).parameters)[1]]
        returned = found["return"]
        if dialect == "postgres":  # a coroutine function: what it returns once awaited
            assert inspect.iscoroutinefunction(function), function.__name__
        if issubclass(kind, Write):
            assert taken == list[kind], (dialect, function.__name__)
            (each,) = typing.get_args(returned)  # list[R | refusals]
            # Besides the declared result, only refusals (GatewayErrors) may come back.
            extra = members(each) - members(result)
            assert all(isinstance(r, type) and issubclass(r, commands.Refusal) for r in extra), (
                dialect,
                function.__name__,
                extra,
            )
        else:
            assert taken == kind, (dialect, function.__name__)
            assert members(returned) == members(result), (dialect, function.__name__)


def test_a_write_of_an_unknown_type_is_refused_before_it_reaches_the_writer() -> None:
    class Stray(Write[None]):
        pass

    assert not REGISTRY.knows(Stray())
