"""The turn's attachment step (``gateway.attachments``) against a real store and an outlet
that serves files the way a chat platform's download does (a loopback stand-in that counts
its fetches): fetched once and kept, so a re-run or a restart never fetches again; limits
before and while fetching; a failed fetch classified, retried once when retryable, and named
in the reply; the rest of the message still answered."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from gateway.attachments import Attachments, TurnInput
from gateway.config import AgentConfig
from gateway.errors import AttachmentTooLarge, PlatformError
from gateway.events import AttachmentFetched, AttachmentHandled, Event
from gateway.messages import (
    AttachmentRef,
    ChatMessage,
    Failure,
    Inbound,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)
from gateway.ports import Watch
from gateway.store import AdmitRow, PendingRows, open_sqlite_store
from gateway.store.sqlite import SqliteStore
from tests.fakes._pdf import pdf_blank_pages, pdf_heavy_pages

pytestmark = pytest.mark.anyio

PHOTO = b"\xff\xd8\xff photo bytes" * 20
LIMIT = 1000


@dataclass
class Files:
    """A chat platform's files: ``source`` -> bytes, and failures to answer first (by source)."""

    platform: str = "telegram"
    files: dict[str, bytes] = field(default_factory=dict)
    failures: dict[str, list[Exception]] = field(default_factory=dict)  # by source, in order
    fetches: list[str] = field(default_factory=list)

    def render(self, text: str) -> list[str]:
        return [text]

    def delivered_as(self, row: StoredMessage) -> None:
        return None

    async def deliver(self, outcome: TurnOutcome) -> None:
        pass

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        yield

    def watching(self, row: StoredMessage) -> Watch | None:
        return None

    def asker(self, row: StoredMessage) -> None:
        return None

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        self.fetches.append(ref.source)
        if self.failures.get(ref.source):
            raise self.failures[ref.source].pop(0)
        data = self.files[ref.source]
        if len(data) > limit:  # a download stops at the limit
            raise AttachmentTooLarge(f"{ref.name} is over {limit}", name=ref.name, limit=limit)
        return data


@dataclass
class NoVoice:
    configured: bool = False

    async def transcribe(
        self, conversation: str, ref: AttachmentRef, data: bytes, *, turn: int = 0
    ) -> str | Failure:
        return Failure("not_configured", False)


def photo(
    source: str = "file-1", size: int | None = len(PHOTO), name: str = "a.jpg"
) -> AttachmentRef:
    return AttachmentRef("image", name, "image/jpeg", size, source)


def attachments(
    store: SqliteStore, files: Files, events: list[Event] | None = None, **config: float
) -> Attachments:
    agent = AgentConfig(**{"max_attachment_bytes": LIMIT, **config})  # type: ignore[arg-type]
    observe = events.append if events is not None else (lambda event: None)
    return Attachments(store, {"telegram": files}, NoVoice(), lambda: agent, observe=observe)


async def admit(store: SqliteStore, *refs: AttachmentRef, text: str = "look") -> StoredMessage:
    inbound = Inbound("telegram", "telegram:1", "m1", text, attachments=refs)
    return (await store.submit(AdmitRow(inbound))).row


async def test_a_file_is_fetched_once_and_a_restart_uses_the_stored_bytes(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    files = Files(files={"file-1": PHOTO})
    events: list[Event] = []
    async with open_sqlite_store(db) as store:
        row = await admit(store, photo())
        asked = await attachments(store, files, events).prepare(row, [])
    data_url = "data:image/jpeg;base64," + base64.b64encode(PHOTO).decode()
    assert [str(i) for i in asked.images] == [data_url]
    assert asked.text == "look" and asked.notices == ()
    assert [e for e in events if isinstance(e, AttachmentFetched)] == [
        AttachmentFetched("telegram:1", "telegram", row.id, "image", len(PHOTO))
    ]
    # A crash before the answer: the process starts again, the row is still pending.
    async with open_sqlite_store(db) as store:
        (pending,) = await store.read(PendingRows("telegram:1"))
        assert pending.attachments[0].sha256 == hashlib.sha256(PHOTO).hexdigest()
        again = await attachments(store, files).prepare(pending, [])
    assert [str(i) for i in again.images] == [data_url]
    assert files.fetches == ["file-1"]  # once, in all


async def test_over_the_limit_before_fetching_or_while_fetching_is_named_not_fetched(
    tmp_path: Path,
) -> None:
    files = Files(files={"big-unknown": b"x" * (LIMIT + 1)})
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = await admit(
            store,
            photo("big-known", size=LIMIT + 1, name="huge.jpg"),
            photo("big-unknown", size=None, name="sneaky.jpg"),
        )
        asked = await attachments(store, files).prepare(row, [])
        (stored,) = await store.read(PendingRows("telegram:1"))
    assert files.fetches == ["big-unknown"]  # the known size was never fetched
    assert asked.images == () and asked.text == "look" and asked.answer is None
    assert asked.notices == (
        "huge.jpg is larger than the 1000 bytes limit for attachments"
        " (max_attachment_bytes = 1000); it was not used.",
        "sneaky.jpg is larger than the 1000 bytes limit for attachments"
        " (max_attachment_bytes = 1000); it was not used.",
    )
    assert [r.sha256 for r in stored.attachments] == [None, None]  # nothing kept
    result = asked.finish(TurnResult(reply="echo: look"))
    assert result.reply.splitlines()[-1] == "echo: look"  # the text is still answered


async def test_a_retryable_fetch_failure_is_retried_once_a_permanent_one_named(
    tmp_path: Path,
) -> None:
    files = Files(
        files={"file-1": PHOTO, "file-2": PHOTO},
        failures={
            "file-1": [PlatformError("bad gateway", status=502)],
            "file-2": [PlatformError("no", status=403), PlatformError("no", status=403)],
        },
    )
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = await admit(store, photo("file-1"), photo("file-2", name="b.jpg"))
        asked = await attachments(store, files).prepare(row, [])
    assert files.fetches == ["file-1", "file-1", "file-2"]
    assert len(asked.images) == 1
    assert asked.notices == ("I could not fetch b.jpg (auth); it was not used.",)


async def test_attachments_past_max_attachments_are_named(tmp_path: Path) -> None:
    files = Files(files={f"f{i}": PHOTO for i in range(3)})
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        refs = [photo(f"f{i}", name=f"p{i}.jpg") for i in range(3)]
        row = await admit(store, *refs)
        asked = await attachments(store, files, max_attachments=2).prepare(row, [])
    assert files.fetches == ["f0", "f1"] and len(asked.images) == 2
    assert asked.notices == (
        "Only 2 attachments are read per message (max_attachments = 2); not used: p2.jpg.",
    )


async def test_a_message_of_nothing_usable_is_answered_without_the_model(tmp_path: Path) -> None:
    voice = AttachmentRef("audio", "voice.ogg", "audio/ogg", 10, "v-1")
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = await admit(store, voice, text="")
        asked = await attachments(store, Files()).prepare(row, [])
    assert asked.answer == TurnResult(
        reply="Voice is not configured here, so voice.ogg was not transcribed.",
        failure=Failure("not_configured", False),
    )


async def test_history_images_are_resolved_for_recent_turns_only(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = await admit(store, photo())
        files = Files(files={"file-1": PHOTO})
        asked = await attachments(store, files, history_images=1).prepare(row, [])
        (kept,) = asked.remembered
        assert kept.images == (f"sha256:{hashlib.sha256(PHOTO).hexdigest()}:image/jpeg",)
        history = [kept, ChatMessage("assistant", "a cat"), kept, ChatMessage("assistant", "b")]
        later = await attachments(store, files, history_images=1).prepare(
            await admit_text(store), history
        )
    assert later.history[0].images == ()  # two turns back: not sent again
    assert later.history[2].images == asked.images  # the last turn: its image again
    assert isinstance(later, TurnInput) and files.fetches == ["file-1"]


async def admit_text(store: SqliteStore, *refs: AttachmentRef, key: str = "m2") -> StoredMessage:
    inbound = Inbound("telegram", "telegram:1", key, "and now?", attachments=refs)
    return (await store.submit(AdmitRow(inbound))).row


@pytest.mark.process
async def test_a_pdf_over_its_budget_is_cut_short_and_never_read_again(tmp_path: Path) -> None:
    """Review H-3: pages sharing one heavy content stream (about 5 s of CPU a page) from a
    4.6 KB file. The reading child is ended by its CPU budget; the reply says so, and what
    it says is kept on the reference, so a restart does not start the work again."""
    db = str(tmp_path / "s.db")
    heavy = pdf_heavy_pages(20)
    files = Files(files={"pdf-1": heavy})
    ref = AttachmentRef("document", "plan.pdf", "application/pdf", len(heavy), "pdf-1")
    events: list[Event] = []
    budget = {"max_attachment_bytes": 100_000, "document_cpu_s": 1}
    async with open_sqlite_store(db) as store:
        row = await admit(store, ref, text="summarise")
        with anyio.fail_after(15):  # 1 s of CPU, 2 s of wall time, and the child's start
            asked = await attachments(store, files, events, **budget).prepare(row, [])
    why = "the PDF could not be read within its budget (1 s of CPU, 1024 MiB of memory)"
    assert asked.notices == (f"plan.pdf: {why}; its text was not used.",)
    assert asked.text == f"summarise\n\n[plan.pdf]\n[{why}]"
    reads = [e for e in events if isinstance(e, AttachmentHandled)]
    assert [(e.step, e.outcome) for e in reads] == [("read", "over_budget")]
    # A crash before the answer: the row is pending again, with what the reading found.
    events.clear()
    async with open_sqlite_store(db) as store:
        (pending,) = await store.read(PendingRows("telegram:1"))
        assert pending.attachments[0].text == f"[{why}]"
        with anyio.fail_after(1):  # no child this time
            again = await attachments(store, files, events, **budget).prepare(pending, [])
    assert again.text == asked.text and events == []


@pytest.mark.process
async def test_a_long_pdf_is_read_up_to_max_document_pages(tmp_path: Path) -> None:
    pdf = pdf_blank_pages(30, text_every=4)
    files = Files(files={"pdf-1": pdf})
    ref = AttachmentRef("document", "long.pdf", "application/pdf", len(pdf), "pdf-1")
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = await admit(store, ref, text="")
        asked = await attachments(
            store, files, max_attachment_bytes=100_000, max_document_pages=10
        ).prepare(row, [])
    assert asked.notices == (
        "long.pdf: only pages 1-10 of 30 were read (max_document_pages = 10).",
    )
    shown = "page 1\n\n\n\npage 5\n\n\n\npage 9\n"
    assert (
        asked.text == f"[long.pdf]\n{shown}\n[pages 1-10 of 30 were read (max_document_pages = 10)]"
    )


async def test_a_file_finding_no_room_in_the_budget_is_named_and_the_budget_comes_back(
    tmp_path: Path,
) -> None:
    """Review L-7: past ``max_attachment_bytes_in_flight`` a file waits for room (here not
    at all), then is left out with a notice; a finished turn gives its bytes back."""
    agent = AgentConfig(max_attachment_bytes=LIMIT, max_attachment_bytes_in_flight=len(PHOTO))
    files = Files(files={"file-1": PHOTO, "file-2": PHOTO})
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        step = Attachments(store, {"telegram": files}, NoVoice(), lambda: agent, budget_wait_s=0)
        first = await step.prepare(await admit(store, photo("file-1")), [])
        assert len(first.images) == 1 and first.held == len(PHOTO) == step.budget.held
        second = await step.prepare(await admit_text(store, photo("file-2", name="b.jpg")), [])
        assert second.images == () and files.fetches == ["file-1"]  # not even fetched
        assert second.notices == (
            "b.jpg was not used: other conversations hold as many attachments as botmux keeps"
            " in memory at once (max_attachment_bytes_in_flight); send it again shortly.",
        )
        assert second.text == "and now?"  # the rest is still answered
        step.release(first)
        step.release(second)
        assert step.budget.held == 0
        third = await step.prepare(await admit_text(store, photo("file-2"), key="m3"), [])
        assert len(third.images) == 1 and files.fetches == ["file-1", "file-2"]
