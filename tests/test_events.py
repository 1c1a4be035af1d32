"""Every event is handled by every sink: the metrics, the log line, the failpoints.

The sinks dispatch with a ``match`` ending in ``assert_never``, so mypy rejects an event one of
them forgot (a test below shows it on a copy of the modules); the others enumerate the
union and check what an operator sees of each event: its log line, the samples it moves.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import shutil
import types
import typing
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import events, events_mcp, events_platforms, events_schedules, events_tools
from gateway.app import Observer
from gateway.events import (
    AnswerCommitted,
    ChunkRecorded,
    Event,
    PolicyDecided,
    TurnCompleted,
    log_fields,
)
from gateway.failpoints import EVENTS, Failpoints, place
from gateway.metrics import Metrics

CLASSES: tuple[type[Event], ...] = typing.get_args(Event)
# Failpoint places; counted as turns, deliveries, firings.
NOT_COUNTED = {AnswerCommitted, ChunkRecorded, events_schedules.ScheduleDue}


def sample(cls: type[Event]) -> Event:
    """An instance with a plausible value for every field, read off its type hints."""
    values: dict[str, object] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        first = options[0]
        if typing.get_origin(hint) is typing.Literal:
            values[f.name] = typing.get_args(hint)[0]
        elif first is bool:
            values[f.name] = True
        elif first is int:
            values[f.name] = 7
        elif first is float:
            values[f.name] = 0.25
        elif first is str:
            values[f.name] = "telegram:42" if f.name == "conversation" else "x"
        else:
            raise AssertionError(f"{cls.__name__}.{f.name}: a field of type {hint}")
    return cls(**values)  # type: ignore[arg-type]


def counted(metrics: Metrics) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The samples that moved from zero: (name, labels)."""
    moved = set()
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name.endswith("_created") or s.value == 0:
                continue
            moved.add((s.name, tuple(sorted(s.labels.items()))))
    return moved


def test_the_union_holds_every_event_class_of_the_module() -> None:
    defined = {
        obj
        for module in (events, events_tools, events_mcp, events_schedules, events_platforms)
        for obj in vars(module).values()
        if inspect.isclass(obj) and obj.__module__ == module.__name__
    }
    assert defined == set(CLASSES)
    assert len({cls.name for cls in CLASSES}) == len(CLASSES)  # one log name each
    for cls in CLASSES:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert not hasattr(sample(cls), "__dict__"), cls  # slotted


def test_every_event_moves_its_own_metrics_and_no_other_events() -> None:
    seen: dict[type[Event], set[tuple[str, tuple[tuple[str, str], ...]]]] = {}
    for cls in CLASSES:
        metrics = Metrics()
        metrics.observe(sample(cls))  # an event the match forgot ends in assert_never
        seen[cls] = counted(metrics)
        assert bool(seen[cls]) is (cls not in NOT_COUNTED), (cls, seen[cls])
    for a, b in ((a, b) for a in CLASSES for b in CLASSES if a is not b):
        assert not seen[a] & seen[b], (a, b)


def test_every_event_logs_one_line_named_as_before(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway")
    observe = Observer(Metrics(), Failpoints())
    for cls in CLASSES:
        caplog.clear()
        event = sample(cls)
        observe(event)
        (record,) = caplog.records
        assert record.getMessage() == cls.name
        assert record.levelno == event.level in (logging.DEBUG, logging.INFO, logging.WARNING)
        for key, value in log_fields(event).items():
            assert getattr(record, key) == value


def test_the_log_fields_keep_their_names_and_order() -> None:
    done = TurnCompleted("peer:short", 3, "peer", None, "gpt", 1.5)
    assert list(log_fields(done)) == [
        "conversation",
        "row",
        "platform",
        "failure",
        "model",
        "seconds",
    ]
    assert done.level == logging.INFO
    assert TurnCompleted("peer:s", 3, "peer", "auth", "gpt", 1.5).level == logging.WARNING
    bench = PolicyDecided("peer:s", "peer", 3, "bench", "gpt", "auth", seconds=3600.0, key="…abcd")
    assert log_fields(bench) == {
        "conversation": "peer:s",
        "platform": "peer",
        "turn": 3,
        "decision": "bench",
        "model": "gpt",
        "reason": "auth",
        "seconds": 3600.0,
        "key": "…abcd",
    }


def test_each_failpoint_is_the_place_of_one_event() -> None:
    places = {cls: place(sample(cls)) for cls in CLASSES}
    assert {p for p in places.values() if p is not None} == set(EVENTS.values())
    failpoints = Failpoints.from_env({"BOTMUX_FAILPOINT": "between_chunks:kill@1000"})
    for cls in CLASSES:
        failpoints.passed(sample(cls))
    assert failpoints.passes == {"chunk_recorded": 1}
    failed_call = events.ModelCalled("gpt", "error", "timeout")
    assert place(failed_call) is None  # after_model_call is the answered call only


def test_an_event_left_out_of_a_sink_fails_type_checking(tmp_path: Path) -> None:
    """A copy of the modules with one more event that no sink knows and that has no level."""
    api = pytest.importorskip("mypy.api")
    package = tmp_path / "gateway"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = Path(events.__file__).parent
    for name in (
        *("errors.py", "metrics.py", "failpoints.py"),
        *("events_mcp.py", "events_tools.py", "events_schedules.py", "events_platforms.py"),
    ):
        shutil.copy(source / name, package / name)
    text = (source / "events.py").read_text()
    added = """@dataclass(frozen=True, slots=True)
class SomethingNew:
    name: ClassVar[str] = "something_new"


Event = (
    SomethingNew
    |"""
    assert text.count("Event = (\n") == 1
    (package / "events.py").write_text(text.replace("Event = (\n", added))
    out, err, status = api.run(
        ["--strict", "--cache-dir", str(tmp_path / ".cache"), "--no-error-summary", str(package)]
    )
    assert status == 1, out + err
    broken = {line.split(":")[0].rsplit("/", 1)[-1] for line in out.splitlines() if line}
    assert broken == {"metrics.py", "failpoints.py", "events.py"}, out
    assert out.count('"assert_never" has incompatible type "SomethingNew"') == 2, out  # metrics
    assert 'Item "SomethingNew" of' in out and 'has no attribute "level"' in out, out  # log line


def test_no_event_field_is_typed_any() -> None:
    for cls in CLASSES:
        for hint in typing.get_type_hints(cls).values():
            assert hint is not typing.Any and typing.Any not in typing.get_args(hint), cls
            assert not isinstance(hint, types.GenericAlias), (cls, hint)  # no dicts, no lists
