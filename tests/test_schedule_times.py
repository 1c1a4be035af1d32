"""Due times and the firing decision (SPEC 16), pure: cron in a time zone across DST (Europe/
Berlin, spring and autumn 2026), ``every`` aligned to the epoch, ``at``, the first due time
after the schedule was first seen, catch-up after downtime, and the words of every problem.
The same DST cases through a running gateway's loop are in tests/test_schedules_dst.py.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from gateway.schedule_times import (
    Done,
    Fire,
    Skip,
    Wait,
    When,
    due_between,
    min_gap,
    next_due,
    plan,
    problem,
    rfc3339,
)


def t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


BERLIN = "Europe/Berlin"


def test_a_time_in_the_skipped_spring_hour_fires_at_the_next_valid_minute() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    when = When("cron", "30 2 * * *", BERLIN)
    due = next_due(when, t("2026-03-29T01:00:00+01:00"))
    assert due is not None and rfc3339(due) == "2026-03-29T01:00:00Z"  # 03:00 CEST
    after = next_due(when, due)
    assert after is not None and rfc3339(after) == "2026-03-30T00:30:00Z"  # 02:30 CEST


def test_a_time_in_the_repeated_autumn_hour_fires_once() -> None:
    # 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    when = When("cron", "30 2 * * *", BERLIN)
    first = next_due(when, t("2026-10-25T01:00:00+02:00"))
    assert first is not None and rfc3339(first) == "2026-10-25T00:30:00Z"  # 02:30 CEST
    second = next_due(when, first)
    assert second is not None and rfc3339(second) == "2026-10-26T01:30:00Z"  # not 02:30 CET
    # From inside the second 02:00-03:00 (CET), the first 02:30 is past: the next day's.
    inside = next_due(when, t("2026-10-25T02:15:00+01:00"))
    assert inside is not None and rfc3339(inside) == "2026-10-26T01:30:00Z"


def test_a_wildcard_hour_keeps_its_interval_in_real_time_through_the_autumn_hour() -> None:
    when = When("cron", "*/30 * * * *", BERLIN)
    times, at = [], t("2026-10-25T01:45:00+02:00")
    for _ in range(5):
        nxt = next_due(when, at)
        assert nxt is not None
        times.append(rfc3339(nxt))
        at = nxt
    assert times == [
        "2026-10-25T00:00:00Z",  # 02:00 CEST
        "2026-10-25T00:30:00Z",  # 02:30 CEST
        "2026-10-25T01:00:00Z",  # 02:00 CET
        "2026-10-25T01:30:00Z",  # 02:30 CET
        "2026-10-25T02:00:00Z",  # 03:00 CET
    ]


def test_every_is_aligned_to_the_epoch_whoever_computes_it() -> None:
    when = When("every", "6h")
    for after in ("2026-06-01T00:00:00+00:00", "2026-06-01T05:59:59+00:00"):
        due = next_due(when, t(after))
        assert due is not None and rfc3339(due) == "2026-06-01T06:00:00Z"
    assert due_between(when, t("2026-06-01T00:00:00+00:00"), t("2026-06-02T00:00:00+00:00")) == (
        4,
        t("2026-06-02T00:00:00+00:00"),
    )


def test_the_first_due_time_is_after_the_schedule_was_first_seen() -> None:
    when = When("every", "1h")
    seen = t("2026-06-01T10:20:00+00:00")
    decided = plan(when, "latest", cursor=None, first_seen=seen, now=seen, grace_s=60)
    assert decided == Wait(t("2026-06-01T11:00:00+00:00"))


def test_an_at_already_past_when_first_seen_is_a_missed_due_time() -> None:
    when = When("at", "2026-06-01T09:00:00Z")
    seen = t("2026-06-01T12:00:00+00:00")
    at = t("2026-06-01T09:00:00+00:00")
    assert plan(when, "latest", cursor=None, first_seen=seen, now=seen, grace_s=60) == Fire(at)
    assert plan(when, "skip", cursor=None, first_seen=seen, now=seen, grace_s=60) == Skip(at, 1)
    assert plan(when, "latest", cursor=at, first_seen=seen, now=seen, grace_s=60) == Done()


def test_after_downtime_latest_fires_the_latest_once_and_skip_fires_none() -> None:
    when = When("every", "1h")
    cursor = t("2026-06-01T10:00:00+00:00")
    now = t("2026-06-01T13:00:30+00:00")
    latest = t("2026-06-01T13:00:00+00:00")
    assert plan(when, "latest", cursor=cursor, first_seen=0, now=now, grace_s=60) == Fire(
        latest, missed=2
    )
    assert plan(when, "skip", cursor=cursor, first_seen=0, now=now, grace_s=60) == Skip(latest, 3)
    # One due time a few seconds late is the loop's own lateness: it fires, skip or not.
    now = t("2026-06-01T11:00:05+00:00")
    assert plan(when, "skip", cursor=cursor, first_seen=0, now=now, grace_s=60) == Fire(
        t("2026-06-01T11:00:00+00:00")
    )


@pytest.mark.parametrize(
    ("when", "words"),
    [
        (
            When("cron", "61 * * * *"),
            "'61 * * * *' is not a five-field cron expression: Bad minute",
        ),
        (When("cron", "* * *"), "not a five-field cron expression: Wrong number of fields"),
        (When("cron", "0 9 * * *", "Mars/Olympus"), "'Mars/Olympus' is not an IANA time zone"),
        (When("every", "30x"), "'30x' is not an interval"),
        (When("every", "30s"), "every 30s is more often than every 1 min"),
        (When("at", "tomorrow"), "'tomorrow' is not an RFC 3339 time"),
        (When("at", "2026-06-01T09:00:00"), "has no offset: write it with Z or +01:00"),
    ],
)
def test_every_problem_is_named(when: When, words: str) -> None:
    found = problem(when)
    assert found is not None and words in found


def test_the_tightest_gap_of_a_cron_expression() -> None:
    now = t("2026-06-01T00:00:00+00:00")
    assert min_gap(When("cron", "* * * * *"), now) == 60
    assert min_gap(When("cron", "0,5 9 * * *"), now) == 300
    assert min_gap(When("every", "2h"), now) == 7200
    assert min_gap(When("at", "2026-06-02T00:00:00Z"), now) is None
