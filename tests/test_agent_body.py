"""agent/_body.py: a model request's JSON with its images' data URLs spliced in is the very
bytes ``json.dumps`` makes of it, whatever the content types and texts around them (a user can
type the placeholder itself); and the large URLs never pass through the encoder. Plus the
peer API's base64 decoding, which refuses exactly what its OpenAPI pattern refuses."""

from __future__ import annotations

import base64
import json
import os
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import _body
from gateway.attachments import data_url
from gateway.messages import DataUrl
from platforms.peer.attachments import B64_PATTERN, Files
from platforms.peer.convert import BadRequest

IMAGE = os.urandom(_body.SPLICE_MIN)  # its base64 is over the splice size


def plain(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def request(text: str, urls: list[str], history: str = "hello") -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend({"type": "image_url", "image_url": {"url": u, "detail": "auto"}} for u in urls)
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": history},
            {"role": "user", "content": parts},
        ],
        "stream": True,
    }


content_types = st.text(
    alphabet=st.sampled_from(list('image/png+;,"\\\x00\x1f\u00e9\u2028 ')), max_size=12
)
texts = st.one_of(
    st.text(max_size=40),
    st.just(_body.PLACEHOLDER),
    st.builds(lambda a, b: a + _body.PLACEHOLDER + b, st.text(max_size=5), st.text(max_size=5)),
)


@settings(max_examples=200, deadline=None)
@given(
    types=st.lists(content_types, max_size=3),
    sizes=st.lists(st.sampled_from([0, 10, _body.SPLICE_MIN]), min_size=3, max_size=3),
    text=texts,
    history=texts,
)
def test_the_spliced_body_is_the_plain_encoders_bytes(
    types: list[str], sizes: list[int], text: str, history: str
) -> None:
    urls: list[str] = [data_url(t, IMAGE[:n]) for t, n in zip(types, sizes, strict=False)]
    urls.append("https://example.com/cat.png")
    urls.append("data:image/png;base64," + base64.b64encode(IMAGE).decode())  # a plain str
    body = request(text, urls, history)
    encoded = _body.encode(body)
    assert encoded == plain(body)
    assert json.loads(encoded) == body


def test_large_data_urls_never_pass_through_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def measured(body: Any) -> bytes:
        data = plain(body)
        seen.append(len(data))
        return data

    monkeypatch.setattr(_body, "dumps", measured)
    big = [data_url("image/png", IMAGE), data_url('image/"odd",type', IMAGE)]
    body = request("what are these?", big)
    encoded = _body.encode(body)
    assert encoded == plain(body)
    assert seen == [len(plain(request("what are these?", [_body.PLACEHOLDER] * 2)))]
    assert all(len(u) > 80_000 for u in big) and seen[0] < 1_000
    assert isinstance(big[0], DataUrl)
    # The caller's body is untouched (a retry or a fallback model encodes it again).
    assert body["messages"][2]["content"][1]["image_url"]["url"] is big[0]

    seen.clear()  # the placeholder inside a text: not a string of its own, still spliced
    body = request(f"say {_body.PLACEHOLDER}", big)
    assert _body.encode(body) == plain(body)
    assert len(seen) == 1 and seen[0] < 1_000

    seen.clear()  # a whole text that is the placeholder: the plain way, once the splice saw it
    body = request(_body.PLACEHOLDER, big)
    assert _body.encode(body) == plain(body)
    assert len(seen) == 2 and seen[1] > 160_000


def test_bodies_without_images_are_encoded_once() -> None:
    for body in (
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": "not a list"},
        {"model": "m"},
    ):
        assert _body.encode(body) == plain(body)


def test_inline_base64_is_refused_exactly_where_the_openapi_pattern_refuses() -> None:
    """The decoder (pybase64, strict) against the published pattern, on strings made of the
    alphabet, padding, and characters that are not base64."""
    pattern = re.compile(B64_PATTERN.removeprefix("^").removesuffix("$"))
    rng = random.Random(20)
    alphabet = "AB+/=a9 \n-_"
    samples = ["YWJj=", "YWJj====", "YQ==\n", "YR==", "", "YWI="]
    samples += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(5000)
    ]
    for sample in samples:
        files = Files(max_bytes=1 << 20)
        try:
            files.add("image", "x.png", "image/png", sample)
            accepted = True
        except BadRequest:
            accepted = False
        assert accepted == bool(pattern.fullmatch(sample)), repr(sample)
