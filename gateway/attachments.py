"""The turn's attachment step (SPEC 9): from a user row's attachment references to what the
model is asked, before the model runs.

For each reference, in the order sent (at most ``[agent] max_attachments``): the bytes are
fetched through the platform's outlet unless the store has them (``sha256`` set), and kept
there, content-addressed, before anything else happens, so a re-run or a restart never
fetches twice; a fetch failure is classified like a failed send (``policy.classify_send``)
and retried once when retryable. Then images become ``image_url`` data URLs, voice and audio
are transcribed (``[transcription]``), documents read (``gateway.documents``); a transcript
or a document's text is kept on the reference too, so it is made once. Whatever cannot be
used (too large, not fetched, not transcribed, an unknown type) becomes a notice naming the
file, at the top of the reply: nothing vanishes silently, and the rest is still answered.

The history keeps images as references (``sha256:<hex>:<type>`` in ``ChatMessage.images``),
resolved to data URLs only for the last ``[agent] history_images`` turns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, assert_never

import anyio
from pybase64 import b64encode

from gateway.byte_budget import ByteBudget
from gateway.config import AgentConfig
from gateway.documents import Unreadable, document_text, is_pdf, readable
from gateway.errors import AttachmentRefused, AttachmentTooLarge, GatewayError
from gateway.events import AttachmentFetched, AttachmentHandled, Observe
from gateway.messages import (
    ATTACHMENT_FAILURES,
    AttachmentRef,
    ChatMessage,
    DataUrl,
    Failure,
    Image,
    StoredMessage,
    TurnResult,
)
from gateway.pdf import PdfBudget, PdfText, read_pdf
from gateway.ports import Outlet, Transcriber
from gateway.store import Blob, SaveAttachment, Store
from policy import classify_send
from policy.classify import RATE_LIMIT

log = logging.getLogger(__name__)

REF_PREFIX = "sha256:"
TOO_LARGE, UNSUPPORTED, NOT_CONFIGURED = ATTACHMENT_FAILURES
_RETRY_CAP_S = 5.0  # the longest a fetch's one retry waits for a Retry-After
PDF_READERS = 2  # PDF reading children at once, per gateway
BUDGET_WAIT_S = 60.0  # the longest a file waits for room in max_attachment_bytes_in_flight


def size_text(size: int) -> str:
    """``20 MiB`` for 20971520, ``1.5 KiB`` for 1536: limits as a user reads them."""
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.4g} {unit}"
    return f"{size} bytes"


def too_large(name: str, limit: int) -> str:
    return (
        f"{name} is larger than the {size_text(limit)} limit for attachments"
        f" (max_attachment_bytes = {limit}); it was not used."
    )


def is_link(platform: str, ref: AttachmentRef) -> bool:
    """An image the peer API gave as an https URL: passed to the model as is, never fetched."""
    return platform == "peer" and ref.sha256 is None and ref.source.startswith("https://")


def data_url(content_type: str, data: bytes) -> DataUrl:
    # pybase64: 2.5 ms for 20 MiB where the standard library's takes 27-47, on the loop.
    return DataUrl(content_type or "image/jpeg", b64encode(data))


def image_ref(ref: AttachmentRef) -> str:
    """How the history keeps a stored image: by its hash, resolved only when re-sent."""
    return f"{REF_PREFIX}{ref.sha256}:{ref.content_type or 'image/jpeg'}"


def compose(content: str, refs: Sequence[AttachmentRef]) -> str:
    """The message's text for the model: what the user wrote, then each transcript, then
    each document's text under its name."""
    pieces = [content] if content else []
    for ref in refs:
        if ref.text is None:
            continue
        pieces.append(ref.text if ref.kind == "audio" else f"[{ref.name}]\n{ref.text}")
    return "\n\n".join(pieces)


def history_message(row: StoredMessage) -> ChatMessage:
    """A stored row as the history holds it: text with transcripts and documents, images as
    references (links as they are)."""
    images = tuple(
        image_ref(ref) if ref.sha256 else ref.source
        for ref in row.attachments
        if ref.kind == "image" and (ref.sha256 or is_link(row.platform, ref))
    )
    return ChatMessage(row.role, compose(row.content, row.attachments), images)


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What the model is asked for one user row: its text (with transcripts and documents),
    its images (data or https URLs), the history with recent images resolved, and the
    notices that go at the top of the reply. ``answer``: the turn's reply without a model
    call (nothing in the message could be used)."""

    text: str
    history: list[ChatMessage]
    images: tuple[Image, ...] = ()
    notices: tuple[str, ...] = ()
    answer: TurnResult | None = None
    kept_images: tuple[Image, ...] = ()  # as the history keeps them
    rows: tuple[ChatMessage, ...] = ()  # a merged turn's user messages, as kept (``merged``)
    held: int = 0  # bytes taken from the budget for its images: ``Attachments.release``

    @classmethod
    def plain(cls, row: StoredMessage, history: list[ChatMessage]) -> TurnInput:
        return cls(row.content, history)

    @classmethod
    def merged(cls, inputs: Sequence[TurnInput], join: Callable[[Sequence[str]], str]) -> TurnInput:
        """One turn's input for a burst of rows (SPEC 10): their texts joined in arrival
        order, their images and notices together; answered without the model only when no
        row of it has anything the model could use."""
        if len(inputs) == 1:
            return inputs[0]
        answers = [i.answer for i in inputs]
        answer = None
        if all(a is not None for a in answers):
            failure = next(a.failure for a in answers if a is not None)
            answer = TurnResult(
                reply="\n".join(n for i in inputs for n in i.notices), failure=failure
            )
        usable = [i for i in inputs if i.answer is None] or list(inputs)
        return cls(
            join([i.text for i in usable if i.text]),
            inputs[0].history,
            tuple(image for i in inputs for image in i.images),
            tuple(n for i in inputs for n in i.notices),
            answer,
            tuple(image for i in inputs for image in i.kept_images),
            tuple(m for i in inputs for m in i.remembered),
            sum(i.held for i in inputs),
        )

    @property
    def remembered(self) -> tuple[ChatMessage, ...]:
        """The user messages as the session's history cache keeps them (one per row)."""
        return self.rows or (ChatMessage("user", self.text, self.kept_images),)

    def finish(self, result: TurnResult) -> TurnResult:
        """The model's result with the notices at the top of its reply."""
        if not self.notices:
            return result
        return dataclasses.replace(result, reply="\n".join((*self.notices, "", result.reply)))


@dataclass(frozen=True, slots=True)
class _Used:
    """One attachment, handled: the reference as stored now, and what it adds to the turn."""

    ref: AttachmentRef
    image: Image = ""
    notice: str = ""
    failure: Failure | None = None
    held: int = 0  # bytes of the gateway's budget its image holds until the turn ends


@dataclass(slots=True)
class _Fetched:
    ref: AttachmentRef
    data: bytes = field(repr=False)


class Attachments:
    """The attachment step of every turn (one per gateway, built by the composition root)."""

    def __init__(
        self,
        store: Store,
        outlets: Mapping[str, Outlet],
        transcriber: Transcriber,
        config: Callable[[], AgentConfig],
        *,
        vision: Callable[[], bool] = lambda: True,
        observe: Observe = lambda event: None,
        budget_wait_s: float = BUDGET_WAIT_S,
    ) -> None:
        self._store = store
        # Whether any model of the chain sees images: if none does, an image stays a
        # reference (never loaded, never encoded) and the agent says it was not used.
        # Both are read at each turn: a reload (SPEC 13) may change the limits or the chain.
        self._vision = vision
        self._outlets = outlets
        self._transcriber = transcriber
        self._config = config
        self._observe = observe
        # PDFs are read in child processes (gateway.pdf), this many at once: each may use a
        # CPU and up to document_memory_mb until its budget ends it.
        self._readers = anyio.CapacityLimiter(PDF_READERS)
        self._budget = ByteBudget(
            lambda: self._config().max_attachment_bytes_in_flight, wait_s=budget_wait_s
        )

    def __repr__(self) -> str:
        return f"<Attachments max_bytes={self._config().max_attachment_bytes} {self._budget!r}>"

    @property
    def budget(self) -> ByteBudget:
        return self._budget

    def release(self, asked: TurnInput) -> None:
        """The turn is over (answered, stopped, failed): its images' bytes leave the budget."""
        self._budget.give(asked.held)

    async def prepare_all(
        self, rows: Sequence[StoredMessage], history: list[ChatMessage]
    ) -> list[TurnInput]:
        """:meth:`prepare` for each row of a burst; cut short, none of them holds bytes."""
        done: list[TurnInput] = []
        try:
            for row in rows:
                done.append(await self.prepare(row, history))
        except BaseException:
            for asked in done:
                self.release(asked)
            raise
        return done

    async def prepare(self, row: StoredMessage, history: list[ChatMessage]) -> TurnInput:
        """The turn's input for ``row`` (pending), its attachments fetched and used. The
        bytes its images hold are in ``held`` until :meth:`release`."""
        held: list[int] = []
        try:
            return await self._prepare(row, history, held)
        except BaseException:
            self._budget.give(sum(held))  # cut short (a /stop): nobody will release it
            raise

    async def _prepare(
        self, row: StoredMessage, history: list[ChatMessage], held: list[int]
    ) -> TurnInput:
        recent = await self._recent_images(history, held)
        if not row.attachments:
            return TurnInput(row.content, recent, held=sum(held))
        cap = self._config().max_attachments
        notices: list[str] = []
        if len(row.attachments) > cap:
            names = ", ".join(ref.name for ref in row.attachments[cap:])
            notices.append(
                f"Only {cap} attachments are read per message (max_attachments = {cap});"
                f" not used: {names}."
            )
        used: list[_Used] = []
        for i, ref in enumerate(row.attachments[:cap]):
            used.append(await self._use(row, i, ref))
            held.append(used[-1].held)
        notices = [u.notice for u in used if u.notice] + notices
        refs = [u.ref for u in used]
        text = compose(row.content, refs)
        images = tuple(u.image for u in used if u.image)
        kept = history_message(dataclasses.replace(row, attachments=tuple(refs))).images
        answer = None
        if not text.strip() and not images:
            failures = [u.failure for u in used if u.failure is not None]
            failure = failures[0] if failures else Failure(UNSUPPORTED, False)
            answer = TurnResult(reply="\n".join(notices), failure=failure)
        return TurnInput(text, recent, images, tuple(notices), answer, kept, held=sum(held))

    async def _recent_images(
        self, history: list[ChatMessage], held: list[int]
    ) -> list[ChatMessage]:
        """The history with the images of its last ``history_images`` user turns resolved
        (data URLs) and every older image left out (so is one the budget has no room for)."""
        if not any(m.images for m in history):
            return list(history)  # the usual case: one pass, nothing to resolve or leave out
        keep = self._config().history_images
        turns = [i for i, m in enumerate(history) if m.role == "user"]
        recent = set(turns[-keep:]) if keep else set()
        out = list(history)
        for i, m in enumerate(history):
            if not m.images:
                continue
            if i not in recent:
                out[i] = dataclasses.replace(m, images=())
                continue
            out[i] = dataclasses.replace(
                m, images=tuple([await self._resolve(u, held) for u in m.images])
            )
        return out

    async def _resolve(self, image: Image, held: list[int]) -> Image:
        if isinstance(image, DataUrl) or not image.startswith(REF_PREFIX):
            return image
        sha, _, content_type = image.removeprefix(REF_PREFIX).partition(":")
        data = await self._store.read(Blob(sha))
        if data is None:
            return ""
        taken = await self._budget.take(len(data))  # its size known only once read
        if taken is None:
            return ""
        held.append(taken)
        return data_url(content_type, data)

    def _handled(
        self,
        row: StoredMessage,
        ref: AttachmentRef,
        step: Literal["fetch", "transcribe", "read"],
        outcome: str,
        size: int = 0,
    ) -> None:
        facts = (row.conversation, row.platform, row.id, ref.kind)
        self._observe(AttachmentHandled(*facts, step, outcome, size))

    async def _use(self, row: StoredMessage, position: int, ref: AttachmentRef) -> _Used:
        if ref.kind == "image" and is_link(row.platform, ref):
            return _Used(ref, image=ref.source)
        if ref.kind == "image" and ref.sha256 is not None and not self._vision():
            return _Used(ref, image=image_ref(ref))
        if ref.kind != "image" and ref.text is not None:
            return _Used(ref)  # transcribed or read before this run
        if ref.kind == "audio" and not self._transcriber.configured:
            self._handled(row, ref, "transcribe", NOT_CONFIGURED)
            notice = f"Voice is not configured here, so {ref.name} was not transcribed."
            return _Used(ref, notice=notice, failure=Failure(NOT_CONFIGURED, False))
        if ref.kind not in ("image", "audio") and not readable(ref.name, ref.content_type):
            self._handled(row, ref, "read", UNSUPPORTED)
            kind = ref.content_type or "unknown type"
            notice = f"{ref.name} ({kind}) is not a kind of file botmux can read; it was not used."
            return _Used(ref, notice=notice, failure=Failure(UNSUPPORTED, False))
        # Its bytes count in the gateway's budget from before they are loaded: given back
        # once used, unless it is an image sent as data (held until the turn is released).
        most = self._config().max_attachment_bytes  # never more is loaded
        taken = await self._budget.take(min(ref.size if ref.size is not None else most, most))
        if taken is None:
            self._handled(row, ref, "fetch", RATE_LIMIT)
            notice = (
                f"{ref.name} was not used: other conversations hold as many attachments as"
                " botmux keeps in memory at once (max_attachment_bytes_in_flight); send it"
                " again shortly."
            )
            return _Used(ref, notice=notice, failure=Failure(RATE_LIMIT, True))
        try:
            used = await self._load(row, position, ref)
        except BaseException:
            self._budget.give(taken)
            raise
        if isinstance(used.image, DataUrl):
            return dataclasses.replace(used, held=taken)
        self._budget.give(taken)
        return used

    async def _load(self, row: StoredMessage, position: int, ref: AttachmentRef) -> _Used:
        got = await self._bytes(row, position, ref)
        if isinstance(got, _Used):
            return got
        ref, data = got.ref, got.data
        if ref.kind == "image":
            return _Used(
                ref, image=data_url(ref.content_type, data) if self._vision() else image_ref(ref)
            )
        if ref.kind == "audio":
            return await self._transcribe(row, position, ref, data)
        return await self._read(row, position, ref, data)

    async def _bytes(
        self, row: StoredMessage, position: int, ref: AttachmentRef
    ) -> _Fetched | _Used:
        """The attachment's bytes: from the store, else fetched and stored first."""
        limit = self._config().max_attachment_bytes
        if ref.sha256 is not None:
            data = await self._store.read(Blob(ref.sha256))
            if data is not None:
                return _Fetched(ref, data)
        if ref.size is not None and ref.size > limit:
            self._handled(row, ref, "fetch", TOO_LARGE, ref.size)
            return _Used(ref, notice=too_large(ref.name, limit), failure=Failure(TOO_LARGE, False))
        outlet = self._outlets.get(row.platform)
        fetched: bytes | None = None
        failure = Failure("unknown", False, detail="no outlet for the platform")
        for attempt in (1, 2):
            if outlet is None:
                break
            try:
                fetched = await outlet.fetch(ref, limit=limit)
            except AttachmentTooLarge:
                fetched = None
                failure = Failure(TOO_LARGE, False)
                break
            except AttachmentRefused as exc:  # not where the platform keeps files: no fetch
                self._handled(row, ref, "fetch", UNSUPPORTED)
                notice = f"{exc.name} was not fetched: {exc.why}; it was not used."
                return _Used(ref, notice=notice, failure=Failure(UNSUPPORTED, False))
            except GatewayError as exc:
                failure = classify_send(exc)
                log.warning(
                    "attachment fetch failed",
                    extra={
                        "conversation": row.conversation,
                        "turn": row.id,
                        "reason": failure.reason,
                    },
                )
                if attempt == 1 and failure.retryable:
                    await anyio.sleep(min(failure.retry_after or 0.0, _RETRY_CAP_S))
                    continue
                break
            else:
                break
        if fetched is not None and len(fetched) > limit:  # an outlet that did not stop at it
            fetched, failure = None, Failure(TOO_LARGE, False)
        if fetched is None:
            self._handled(row, ref, "fetch", failure.reason)
            if failure.reason == TOO_LARGE:
                return _Used(ref, notice=too_large(ref.name, limit), failure=failure)
            notice = f"I could not fetch {ref.name} ({failure.reason}); it was not used."
            return _Used(ref, notice=notice, failure=failure)
        sha = hashlib.sha256(fetched).hexdigest()
        await self._store.submit(SaveAttachment(row.id, position, sha256=sha, data=fetched))
        self._observe(
            AttachmentFetched(row.conversation, row.platform, row.id, ref.kind, len(fetched))
        )
        return _Fetched(dataclasses.replace(ref, sha256=sha), fetched)

    async def _transcribe(
        self, row: StoredMessage, position: int, ref: AttachmentRef, data: bytes
    ) -> _Used:
        outcome = await self._transcriber.transcribe(row.conversation, ref, data, turn=row.id)
        if isinstance(outcome, Failure):
            self._handled(row, ref, "transcribe", outcome.reason)
            notice = f"I could not transcribe {ref.name} (failure: {outcome.reason})."
            return _Used(ref, notice=notice, failure=outcome)
        await self._store.submit(SaveAttachment(row.id, position, text=outcome))
        self._handled(row, ref, "transcribe", "ok", len(data))
        return _Used(dataclasses.replace(ref, text=outcome))

    async def _read(
        self, row: StoredMessage, position: int, ref: AttachmentRef, data: bytes
    ) -> _Used:
        config = self._config()
        limit = config.max_document_chars
        if is_pdf(ref.name, ref.content_type):
            budget = PdfBudget(
                config.max_document_pages, limit, config.document_cpu_s, config.document_memory_mb
            )
            async with self._readers:
                read = await read_pdf(data, budget)
            if read.ending == "unreadable":
                return self._unreadable(row, ref, f"the PDF could not be read: {read.detail}")
            text, notice = pdf_outcome(ref.name, read, budget)
            outcome = "over_budget" if read.ending == "budget" else "ok"
        else:
            try:
                text, cut = await anyio.to_thread.run_sync(
                    document_text, ref.name, ref.content_type, data, limit
                )
            except Unreadable as exc:
                return self._unreadable(row, ref, str(exc))
            notice, outcome = (too_long(ref.name, limit) if cut else ""), "ok"
        # Kept whatever it says (a budget that ran out included): never read twice.
        await self._store.submit(SaveAttachment(row.id, position, text=text))
        self._handled(row, ref, "read", outcome, len(data))
        return _Used(dataclasses.replace(ref, text=text), notice=notice)

    def _unreadable(self, row: StoredMessage, ref: AttachmentRef, why: str) -> _Used:
        self._handled(row, ref, "read", "unreadable")
        notice = f"I could not read {ref.name}: {why}."
        return _Used(ref, notice=notice, failure=Failure(UNSUPPORTED, False))


def too_long(name: str, limit: int) -> str:
    return (
        f"{name} is longer than {limit} characters (max_document_chars);"
        " only its beginning was read."
    )


def pdf_outcome(name: str, read: PdfText, budget: PdfBudget) -> tuple[str, str]:
    """A PDF's text as kept (with a note on what of it was read, in brackets, as the model
    sees it) and the notice for the reply ("" when it was read whole)."""
    limit, cap = budget.max_chars, budget.max_pages
    of = f" of {read.total:,}" if read.total is not None else ""
    pages = f"pages 1-{read.read}{of}" if read.read != 1 else f"page 1{of}"
    match read.ending:
        case "done" | "unreadable":
            return read.text, ""
        case "chars":
            text = f"{read.text[:limit]}\n[the document was cut at {limit} characters]"
            return text, too_long(name, limit)
        case "pages":
            why = f"max_document_pages = {cap}"
            return (
                f"{read.text}\n[{pages} were read ({why})]",
                f"{name}: only {pages} were read ({why}).",
            )
        case "budget" if read.read:
            why = f"within its budget ({budget.describe()})"
            text = f"{read.text}\n[{pages} were read; the rest could not be read {why}]"
            return text, f"{name} could not be read whole {why}: {pages} were read."
        case "budget":
            why = f"the PDF could not be read within its budget ({budget.describe()})"
            return f"[{why}]", f"{name}: {why}; its text was not used."
        case _:
            assert_never(read.ending)
