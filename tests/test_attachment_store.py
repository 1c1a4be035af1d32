"""Attachments in the store, on both backends (SPEC 9): references admitted with the user row in
one transaction, bytes content-addressed and shared, the text made of them kept, and a deleted
conversation taking its files with it (but not another conversation's copy)."""

from __future__ import annotations

import hashlib

import pytest

from gateway.messages import AttachmentRef, Failure, Inbound, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    AttachmentBytes,
    Blob,
    DeleteConversation,
    DeleteTurn,
    History,
    Message,
    PendingRows,
    SaveAttachment,
    Transcript,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio

PHOTO = b"\x89PNG fake photo bytes"
SHA = hashlib.sha256(PHOTO).hexdigest()


def photo_ref(sha256: str | None = None) -> AttachmentRef:
    return AttachmentRef("image", "photo.jpg", "image/jpeg", len(PHOTO), "file-1", sha256)


def with_files(pmid: str, *refs: AttachmentRef, conversation: str = "peer:a") -> Inbound:
    return Inbound("peer", conversation, pmid, "look", attachments=refs)


async def test_references_are_admitted_with_the_row_and_read_back_in_order(
    open_store: Opener,
) -> None:
    voice = AttachmentRef("audio", "voice.ogg", "audio/ogg", None, "file-2")
    async with open_store() as store:
        admission = await store.submit(AdmitRow(with_files("m1", photo_ref(), voice)))
        row = admission.row
        assert row.attachments == (photo_ref(), voice)
        again = await store.submit(AdmitRow(with_files("m1", photo_ref(), voice)))
        assert again.duplicate
    async with open_store() as store:  # after a restart
        (pending,) = await store.read(PendingRows("peer:a"))
        assert pending.attachments == (photo_ref(), voice)
        assert (await store.read(Message(row.id))).attachments == (photo_ref(), voice)
        (listed,) = await store.read(Transcript("peer:a"))
        assert listed.attachments == (photo_ref(), voice)


async def test_fetched_bytes_and_text_are_kept_so_nothing_is_fetched_twice(
    open_store: Opener,
) -> None:
    kept = AttachmentRef(
        "image", "photo.jpg", "image/jpeg", len(PHOTO), "file-1", SHA, "a cat on a mat"
    )
    async with open_store() as store:
        row = (await store.submit(AdmitRow(with_files("m1", photo_ref())))).row
        await store.submit(SaveAttachment(row.id, 0, sha256=SHA, data=PHOTO))
        await store.submit(SaveAttachment(row.id, 0, text="a cat on a mat"))
        (pending,) = await store.read(PendingRows("peer:a"))
        assert pending.attachments == (kept,)
        await store.submit(AnswerTurn(pending, TurnResult(reply="a cat"), tuple(["a cat"])))
        (user, _) = await store.read(History("peer:a", 10))
        assert user.attachments == (kept,)
    async with open_store() as store:  # after a restart
        (user, _) = await store.read(Transcript("peer:a"))
        assert user.attachments == (kept,)
        assert await store.read(Blob(SHA)) == PHOTO
        assert await store.read(AttachmentBytes("peer:a", SHA)) == ("image/jpeg", PHOTO)
        assert await store.read(AttachmentBytes("peer:b", SHA)) is None  # scoped by conversation


async def test_inline_bytes_are_stored_at_admission_content_addressed(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        a = await store.submit(
            AdmitRow(with_files("m1", photo_ref(SHA)), tuple(({SHA: PHOTO}).items()))
        )
        b = await store.submit(
            AdmitRow(
                with_files("m2", photo_ref(SHA), conversation="peer:b"),
                tuple(({SHA: PHOTO}).items()),
            )
        )
        assert a.row.attachments[0].sha256 == SHA == b.row.attachments[0].sha256
        assert await store.read(AttachmentBytes("peer:b", SHA)) == ("image/jpeg", PHOTO)
        # Deleting one conversation keeps the blob the other still refers to ...
        assert await store.submit(DeleteConversation("peer:a")) == 1
        assert await store.read(AttachmentBytes("peer:a", SHA)) is None
        assert await store.read(Blob(SHA)) == PHOTO
        # ... and the last reference takes it along.
        await store.submit(
            AnswerTurn(
                b.row, TurnResult(reply="x", failure=Failure("bad_request", False)), tuple([])
            )
        )
        assert await store.submit(DeleteConversation("peer:b")) == 2
        assert await store.read(Blob(SHA)) is None
        assert await store.read(Transcript("peer:b")) == []


async def test_deleting_one_turn_takes_its_files_along(open_store: Opener) -> None:
    async with open_store() as store:
        a = (
            await store.submit(
                AdmitRow(with_files("m1", photo_ref(SHA)), tuple(({SHA: PHOTO}).items()))
            )
        ).row
        await store.submit(AnswerTurn(a, TurnResult(reply="a cat"), tuple(["a cat"])))
        assert await store.submit(DeleteTurn(a.id)) is True
        assert await store.read(Blob(SHA)) is None
        assert await store.read(AttachmentBytes("peer:a", SHA)) is None
