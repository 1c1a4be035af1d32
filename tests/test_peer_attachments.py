"""Attachments through the peer API, end to end (SPEC 9): a real gateway, its real store, the
fake model (vision and text-only chains, ``/v1/audio/transcriptions``), real HTTP and the real
``openai`` client. What is asserted is what a client and an operator see: the reply, the
content parts the model received, the transcript, the stored bytes."""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import openai
import pytest

from gateway.config import Config, parse_config
from tests.fakes.openai_server import (
    FakeModel,
    Hold,
    ok,
    open_fake_model,
    rate_limited,
    unauthorized,
)
from tests.harness import ROOT, config_text, running_gateway

pytestmark = [pytest.mark.anyio, pytest.mark.gateway]

PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PHOTO_SHA = hashlib.sha256(PHOTO).hexdigest()
VOICE = b"RIFF fake wave bytes" * 10
UNSEEN = "this model cannot see images; the image was not used"
TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"


def tiny_pdf(text: str) -> bytes:
    """A one-page PDF whose page shows ``text`` (Helvetica), with a correct xref table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(
    tmp_path: Path,
    fake: FakeModel,
    *,
    vision: bool = True,
    extra: str = "",
    model_extra: str = "",
    peer: str = "",
) -> Config:
    model_extra = ('input = ["text", "image"]\n' if vision else "") + model_extra
    text = config_text(tmp_path / "b.db", fake.base_url, extra=extra, model_extra=model_extra)
    text = text.replace('listen = "127.0.0.1:0"\n', f'listen = "127.0.0.1:0"\n{peer}', 1)
    return parse_config(text, source="test", env={})


def transcription(fake: FakeModel, *fallbacks: str, model: str = "whisper-a") -> str:
    text = (
        f'[transcription]\nbase_url = "{fake.base_url}"\nmodel = "{model}"\n'
        'api_keys = ["sk-voice-0001"]\nmax_retries = 1\nbackoff_base_s = 0\n'
    )
    for name in fallbacks:
        text += (
            f'[[transcription.fallbacks]]\nbase_url = "{fake.base_url}"\nmodel = "{name}"\n'
            'api_keys = ["sk-voice-0002"]\nmax_retries = 1\n'
        )
    return text


def image_urls(request: Any) -> list[str]:
    return [p["image_url"]["url"] for p in request.content_parts if p.get("type") == "image_url"]


def last_user_parts(request: Any) -> list[dict[str, Any]]:
    content = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


async def chat(
    http: aiohttp.ClientSession, url: str, session: str, body: dict[str, Any], **kw: Any
) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{url}/api/sessions/{session}/chat", json=body, **kw) as r:
        return r.status, await r.json()


async def test_an_inline_image_reaches_a_vision_model_beside_the_text_and_is_stored(
    tmp_path: Path,
) -> None:
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(
            http, url, "alice", {"message": "what is this?", "attachments": [photo]}
        )
        assert status == 200 and body["failure"] is None
        async with http.get(f"{url}/api/sessions/alice/messages") as r:
            user = (await r.json())["messages"][0]
        async with http.get(f"{url}/api/sessions/alice/attachments/{PHOTO_SHA}") as r:
            assert r.status == 200 and r.content_type == "image/png"
            assert await r.read() == PHOTO
        async with http.get(f"{url}/api/sessions/bob/attachments/{PHOTO_SHA}") as r:
            assert r.status == 404  # another session's file is not found through this one
    (request,) = fake.requests
    assert last_user_parts(request) == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PHOTO)}"}},
    ]
    assert user["content"] == "what is this?" and user["state"] == "answered"
    assert user["attachments"] == [
        {
            "name": "cat.png",
            "kind": "image",
            "content_type": "image/png",
            "size": len(PHOTO),
            "sha256": PHOTO_SHA,
        }
    ]
    with sqlite3.connect(tmp_path / "b.db") as db:
        assert db.execute("SELECT sha256, size FROM blobs").fetchall() == [(PHOTO_SHA, len(PHOTO))]


async def test_a_large_image_reaches_the_model_whole_without_passing_the_json_encoder(
    tmp_path: Path, encoded_sizes: list[int]
) -> None:
    """A 300 KB image: its base64 is spliced into the model request (agent._body), never
    passed to json.dumps, and arrives as the plain encoder would have sent it."""
    image = os.urandom(300_000)
    photo = {"name": "big.jpg", "content_type": "image/jpeg", "data": b64(image)}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(
            http, url, "big", {"message": "and this?", "attachments": [photo]}
        )
        assert status == 200 and body["failure"] is None
    (request,) = fake.requests
    assert last_user_parts(request)[1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/jpeg;base64,{b64(image)}"},
    }
    assert (
        encoded_sizes and max(encoded_sizes) < 10_000
    )  # the 400 KB of base64 went around the encoder


async def test_openai_client_image_url_parts_data_and_https_untouched(tmp_path: Path) -> None:
    link = "https://images.example.invalid/dog.jpg?size=large"
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
    ):
        fake.script(ok("a cat and a dog"))
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        async with client:
            completion = await client.chat.completions.create(
                model="botmux",
                user="carol",
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "compare these"},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/png;base64,{b64(PHOTO)}"},
                            },
                            {"type": "image_url", "image_url": {"url": link}},
                        ],
                    }
                ],
            )
    assert completion.choices[0].message.content == "a cat and a dog"
    (request,) = fake.requests
    assert last_user_parts(request)[0] == {"type": "text", "text": "compare these"}
    assert image_urls(request) == [f"data:image/png;base64,{b64(PHOTO)}", link]


async def test_a_text_only_chain_says_so_plainly_and_still_answers_the_text(
    tmp_path: Path,
) -> None:
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake, vision=False)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(
            http, url, "alice", {"message": "describe it", "attachments": [photo]}
        )
    assert status == 200 and body["failure"] is None
    reply = body["message"]["content"]
    assert UNSEEN in reply.splitlines()[0] and reply.endswith("echo: describe it")
    (request,) = fake.requests
    assert image_urls(request) == [] and request.last_user == "describe it"


async def test_a_turn_with_images_skips_the_models_that_cannot_see_them(
    tmp_path: Path,
) -> None:
    fallback = (
        '[[model.fallbacks]]\nbase_url = "URL"\nmodel = "vision"\napi_keys = ["sk-v-0001"]\n'
        'input = ["text", "image"]\n'
    )
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    async with open_fake_model() as fake:
        cfg = config(
            tmp_path, fake, vision=False, model_extra=fallback.replace("URL", fake.base_url)
        )
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            status, body = await chat(http, url, "s", {"message": "see?", "attachments": [photo]})
            assert status == 200 and UNSEEN not in body["message"]["content"]
            status, body = await chat(http, url, "s", {"message": "and now text"})
            assert status == 200
    # The image turn went straight to the model that sees images; the text turn to the primary.
    assert [r.model for r in fake.requests] == ["vision", "gpt-test"]
    assert len(image_urls(fake.requests[0])) == 1
    assert image_urls(fake.requests[1]) == []  # the primary cannot see the history's image


async def test_history_resends_only_the_images_of_the_last_turns(tmp_path: Path) -> None:
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake, extra="[agent]\nhistory_images = 2\n")) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for i in range(3):
            data = PHOTO + bytes([i])
            photo = {"name": f"p{i}.png", "content_type": "image/png", "data": b64(data)}
            status, _ = await chat(
                http, url, "h", {"message": f"photo {i}", "attachments": [photo]}
            )
            assert status == 200
        status, _ = await chat(http, url, "h", {"message": "which was first?"})
        assert status == 200
    last = fake.requests[-1]
    # Turns 2 and 3 are the last two of the history: their images go again, turn 1's not.
    assert image_urls(last) == [f"data:image/png;base64,{b64(PHOTO + bytes([i]))}" for i in (1, 2)]
    assert "photo 0" in [m["content"] for m in last.messages if isinstance(m["content"], str)]


async def test_voice_by_input_audio_is_transcribed_answered_and_stored(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.transcript = "remind me to buy milk"
        cfg = config(tmp_path, fake, extra=transcription(fake))
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            async with client:
                completion = await client.chat.completions.create(
                    model="botmux",
                    user="dave",
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "input_audio",
                                    "input_audio": {"data": b64(VOICE), "format": "wav"},
                                }
                            ],
                        }
                    ],
                )
            async with http.get(f"{url}/api/sessions/dave/messages") as r:
                user = (await r.json())["messages"][0]
    assert completion.choices[0].message.content == "echo: remind me to buy milk"
    (call,) = fake.transcriptions
    assert (call.model, call.api_key, call.data) == ("whisper-a", "sk-voice-0001", VOICE)
    assert fake.requests[0].last_user == "remind me to buy milk"
    (listed,) = user["attachments"]
    assert listed["kind"] == "audio" and listed["transcript"] == "remind me to buy milk"
    assert listed["sha256"] == hashlib.sha256(VOICE).hexdigest()


@pytest.mark.process
async def test_a_voice_notes_transcript_is_shown_with_its_row(tmp_path: Path) -> None:
    """SPEC 9: the transcript is kept with its row and shown wherever the row's text is,
    marked as one: the transcript route, the console's view of it, ``botmux sessions show``
    (which printed the voice note's row with no text at all)."""
    voice = {"name": "note.wav", "content_type": "audio/wav", "data": b64(VOICE)}
    async with open_fake_model() as fake:
        fake.transcript = "remind me to buy milk"
        text = config_text(tmp_path / "b.db", fake.base_url, extra=transcription(fake))
        file = tmp_path / "botmux.toml"
        file.write_text(text)
        cfg = parse_config(text, source=str(file), env={})
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            status, _ = await chat(http, url, "v", {"attachments": [voice]})
            assert status == 200
            status, _ = await chat(http, url, "v", {"message": "and", "attachments": [voice]})
            assert status == 200
            async with http.get(f"{url}/api/sessions/v/messages") as r:
                route = [m["content"] for m in (await r.json())["messages"] if m["role"] == "user"]
            async with http.get(f"{url}/api/admin/conversations/peer:v/messages") as r:
                body = await r.json()
                console = [m["content"] for m in body["messages"] if m["role"] == "user"]
    heard = "[voice transcript] remind me to buy milk"
    assert route == console == [heard, f"and\n{heard}"]
    shown = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "gateway", "sessions", "show", "peer:v", "--config", str(file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    )
    assert shown.returncode == 0, shown.stderr
    user_lines = [line for line in shown.stdout.splitlines() if " user " in line]
    assert user_lines[0].endswith(f"[answered] {heard}")
    assert user_lines[1].endswith("[answered] and") and f"    {heard}" in shown.stdout


async def test_transcription_falls_back_on_429_and_fails_honestly_for_good(
    tmp_path: Path,
) -> None:
    voice = {"name": "note.ogg", "content_type": "audio/ogg", "data": b64(VOICE)}
    async with open_fake_model() as fake:
        cfg = config(tmp_path, fake, extra=transcription(fake, "whisper-b"))
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            fake.script_transcription(rate_limited(), model="whisper-a")
            fake.script_transcription(ok("first note"), model="whisper-b")
            status, body = await chat(http, url, "v", {"attachments": [voice]})
            assert status == 200 and body["message"]["content"] == "echo: first note"
            # whisper-a is benched by its 429: the next note goes to whisper-b, which refuses.
            fake.script_transcription(unauthorized(), model="whisper-b")
            status, body = await chat(http, url, "v", {"message": "hm", "attachments": [voice]})
            assert status == 200
            async with http.get(f"{url}/api/sessions/v/messages") as r:
                rows = (await r.json())["messages"]
    assert [c.model for c in fake.transcriptions] == ["whisper-a", "whisper-b", "whisper-b"]
    reply = body["message"]["content"]
    assert "could not transcribe note.ogg (failure: auth)" in reply and reply.endswith("echo: hm")
    assert rows[2]["content"] == "hm" and rows[2]["attachments"][0]["name"] == "note.ogg"
    assert "transcript" not in rows[2]["attachments"][0]


async def test_voice_without_transcription_configured_says_so(tmp_path: Path) -> None:
    voice = {"name": "note.ogg", "content_type": "audio/ogg", "data": b64(VOICE)}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(http, url, "v", {"attachments": [voice]})
    assert status == 200
    assert "Voice is not configured" in body["message"]["content"]
    assert body["failure"] == {"reason": "not_configured", "retryable": False}
    assert fake.requests == [] and fake.transcriptions == []


@pytest.mark.process
async def test_documents_pdf_and_text_are_read_other_types_named(tmp_path: Path) -> None:
    files = [
        {
            "name": "report.pdf",
            "content_type": "application/pdf",
            "data": b64(tiny_pdf("Q3 revenue up")),
        },
        {"name": "notes.txt", "content_type": "text/plain", "data": b64(b"buy milk\nwalk dog")},
        {"name": "archive.zip", "content_type": "application/zip", "data": b64(b"PK\x03\x04")},
    ]
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(http, url, "d", {"message": "summarise", "attachments": files})
    assert status == 200
    asked = fake.requests[0].last_user
    assert asked.startswith("summarise")
    assert "[report.pdf]\nQ3 revenue up" in asked and "[notes.txt]\nbuy milk\nwalk dog" in asked
    assert "archive.zip" not in asked
    first = body["message"]["content"].splitlines()[0]
    assert "archive.zip (application/zip)" in first and "not a kind of file" in first


async def test_a_long_document_is_cut_with_a_note(tmp_path: Path) -> None:
    text = {"name": "big.txt", "content_type": "text/plain", "data": b64(b"x" * 500)}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake, extra="[agent]\nmax_document_chars = 100\n")) as (
            _,
            url,
        ),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(http, url, "d", {"message": "read", "attachments": [text]})
    assert status == 200
    assert "x" * 100 + "\n[the document was cut at 100 characters]" in fake.requests[0].last_user
    assert "x" * 101 not in fake.requests[0].last_user
    assert "big.txt is longer than 100 characters" in body["message"]["content"]


async def test_oversized_or_bad_data_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    big = {"name": "huge.png", "content_type": "image/png", "data": b64(PHOTO)}
    bad = {"name": "bad.png", "content_type": "image/png", "data": "not base64!"}
    extra = "[agent]\nmax_attachment_bytes = 100\n"
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake, extra=extra)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        status, body = await chat(http, url, "o", {"message": "hi", "attachments": [big]})
        assert status == 413 and "huge.png" in body["error"]["message"]
        status, body = await chat(http, url, "o", {"message": "hi", "attachments": [bad]})
        assert status == 400 and "bad.png" in body["error"]["message"]
        async with http.get(f"{url}/api/sessions/o/messages") as r:
            assert (await r.json())["messages"] == []
        status, body = await chat(http, url, "o", {"message": "still here"})
        assert status == 200 and body["message"]["content"] == "echo: still here"
    with sqlite3.connect(tmp_path / "b.db") as db:
        assert db.execute("SELECT COUNT(*) FROM blobs").fetchall() == [(0,)]
    assert [r.last_user for r in fake.requests] == ["still here"]


async def test_a_content_type_must_be_a_mime_type(tmp_path: Path) -> None:
    """Review L-6: a CR/LF in content_type was stored, and the file could never be
    downloaded (aiohttp refused the header). Now 400 naming the field, nothing stored; a
    type with parameters is taken and served back as sent."""
    notes = b64(b"buy milk")
    hostile = {"name": "n.txt", "content_type": "text/plain\r\nSet-Cookie: x=1", "data": notes}
    fine = {"name": "n.txt", "content_type": 'text/plain; charset="utf-8"', "data": notes}
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake)) as (_, url),
        aiohttp.ClientSession() as http,
    ):
        for bad in (hostile["content_type"], "text", "text/plain; x", "a/" + "b" * 300):
            body = {"message": "read", "attachments": [{**hostile, "content_type": bad}]}
            status, answer = await chat(http, url, "m", body)
            assert status == 400, (bad, answer)
            assert answer["error"]["param"] == "attachments[0].content_type"
            assert "attachments[0].content_type must be a MIME type" in answer["error"]["message"]
        async with http.get(f"{url}/api/sessions/m/messages") as r:
            assert (await r.json())["messages"] == []
        status, answer = await chat(http, url, "m", {"message": "read", "attachments": [fine]})
        assert status == 200, answer
        sha = hashlib.sha256(b"buy milk").hexdigest()
        async with http.get(f"{url}/api/sessions/m/attachments/{sha}") as r:
            assert r.status == 200 and await r.read() == b"buy milk"
            assert r.headers["Content-Type"] == 'text/plain; charset="utf-8"'


async def test_a_turn_waits_for_room_in_the_attachment_budget(tmp_path: Path) -> None:
    """Review L-7: the images turns hold at once are bounded by
    ``max_attachment_bytes_in_flight``. With room for one photo, a second conversation's
    photo waits (nothing of it is sent) until the first turn's model call is over."""
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    extra = f"[agent]\nmax_attachment_bytes_in_flight = {len(PHOTO) * 3 // 2}\n"
    async with (
        open_fake_model() as fake,
        running_gateway(config(tmp_path, fake, extra=extra)) as (app, url),
        aiohttp.ClientSession() as http,
    ):
        assert app.router is not None
        fake.script(Hold())
        replies: dict[str, str] = {}

        async def send(session: str) -> None:
            body = {"message": f"look {session}", "attachments": [photo]}
            status, answer = await chat(http, url, session, body)
            assert status == 200, answer
            replies[session] = answer["message"]["content"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "a")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            tg.start_soon(send, "b")
            with anyio.fail_after(10):
                while (b := app.router.actors().get("peer:b")) is None or not (
                    b.running or b.turns  # its turn started (or, unbounded, even answered)
                ):
                    await anyio.wait_all_tasks_blocked()
            await anyio.wait_all_tasks_blocked()
            assert len(fake.requests) == 1  # b's turn runs, and waits for room
            fake.release()
    assert "look a" in replies["a"] and "look b" in replies["b"]
    assert [len(image_urls(r)) for r in fake.requests] == [1, 1]  # both photos were seen


async def test_an_attachment_is_scoped_to_its_token_and_deleted_with_its_session(
    tmp_path: Path,
) -> None:
    peer = (
        f'[[peer.tokens]]\ntoken = "{TOKEN_A}"\nname = "a"\nsessions = ["a-*"]\n'
        f'[[peer.tokens]]\ntoken = "{TOKEN_B}"\nname = "b"\nsessions = ["b-*"]\n'
    )
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    as_a = {"Authorization": f"Bearer {TOKEN_A}"}
    as_b = {"Authorization": f"Bearer {TOKEN_B}"}
    async with open_fake_model() as fake:
        text = config_text(
            tmp_path / "b.db", fake.base_url, model_extra='input = ["text", "image"]\n'
        )
        cfg = parse_config(text.replace("[model]", peer + "\n[model]", 1), source="t", env={})
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            status, _ = await chat(
                http, url, "a-1", {"message": "x", "attachments": [photo]}, headers=as_a
            )
            assert status == 200
            path = f"{url}/api/sessions/a-1/attachments/{PHOTO_SHA}"
            async with http.get(path, headers=as_a) as r:
                assert r.status == 200 and await r.read() == PHOTO
            async with http.get(path, headers=as_b) as r:
                assert r.status == 404
            async with http.get(path) as r:
                assert r.status == 401
            async with http.delete(f"{url}/api/sessions/a-1", headers=as_a) as r:
                assert r.status == 200
            async with http.get(path, headers=as_a) as r:
                assert r.status == 404
    with sqlite3.connect(tmp_path / "b.db") as db:
        assert db.execute("SELECT COUNT(*) FROM blobs").fetchall() == [(0,)]
        assert db.execute("SELECT COUNT(*) FROM attachments").fetchall() == [(0,)]


async def test_on_postgresql_an_image_is_stored_as_bytea_and_served(
    tmp_path: Path, postgres_url: str
) -> None:
    photo = {"name": "cat.png", "content_type": "image/png", "data": b64(PHOTO)}
    async with open_fake_model() as fake:
        text = config_text(
            tmp_path / "b.db",
            fake.base_url,
            store_url=postgres_url,
            model_extra='input = ["text", "image"]\n',
        )
        cfg = parse_config(text, source="test", env={})
        async with running_gateway(cfg) as (_, url), aiohttp.ClientSession() as http:
            status, body = await chat(
                http, url, "pg", {"message": "and this?", "attachments": [photo]}
            )
            assert status == 200 and body["failure"] is None
            async with http.get(f"{url}/api/sessions/pg/attachments/{PHOTO_SHA}") as r:
                assert r.status == 200 and await r.read() == PHOTO
            async with http.get(f"{url}/api/sessions/pg/messages") as r:
                (user, _) = (await r.json())["messages"]
    assert user["attachments"][0]["sha256"] == PHOTO_SHA
    assert image_urls(fake.requests[0]) == [f"data:image/png;base64,{b64(PHOTO)}"]
