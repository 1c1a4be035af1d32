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

IMAGE = os.urandom(100_000)


def as_text(value: Any) -> Any:
    """``value`` with each DataUrl as its URL's text: what the plain encoder is given."""
    if isinstance(value, DataUrl):
        return str(value)
    if isinstance(value, dict):
        return {k: as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_text(v) for v in value]
    return value


def plain(body: Any) -> bytes:
    return json.dumps(as_text(body), ensure_ascii=False, separators=(",", ":")).encode()


def request(text: str, urls: list[Any], history: str = "hello") -> dict[str, Any]:
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
    sizes=st.lists(st.sampled_from([0, 10, len(IMAGE)]), min_size=3, max_size=3),
    text=texts,
    history=texts,
)
def test_the_spliced_body_is_the_plain_encoders_bytes(
    types: list[str], sizes: list[int], text: str, history: str
) -> None:
    urls: list[Any] = [data_url(t, IMAGE[:n]) for t, n in zip(types, sizes, strict=False)]
    urls.append("https://example.com/cat.png")
    urls.append("data:image/png;base64," + base64.b64encode(IMAGE).decode())  # a plain str
    body = request(text, urls, history)
    encoded = _body.encode(body)
    assert encoded == plain(body)
    assert json.loads(encoded) == as_text(body)


def test_images_never_pass_through_the_encoder(encoded_sizes: list[int]) -> None:
    seen = encoded_sizes
    big = [data_url("image/png", IMAGE), data_url('image/"odd",type', IMAGE)]
    body = request("what are these?", big)
    assert _body.encode(body) == plain(body)
    assert len(seen) == 1 and seen[0] < 1_000  # 2 x 133 KB of base64 went around it
    assert body["messages"][2]["content"][1]["image_url"]["url"] is big[0]  # untouched

    seen.clear()  # the placeholder inside a text: not a string of its own
    body = request(f"say {_body.PLACEHOLDER}", big)
    assert _body.encode(body) == plain(body)
    assert len(seen) == 1

    seen.clear()  # a whole text that is the placeholder: another placeholder is taken
    body = request(_body.PLACEHOLDER, big, history=_body.PLACEHOLDER)
    assert _body.encode(body) == plain(body)
    assert len(seen) == 2 and seen[1] < 1_000


def test_bodies_without_images_and_what_json_cannot_encode() -> None:
    for body in (
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": "not a list"},
        {"model": "m"},
    ):
        assert _body.encode(body) == plain(body)
    with pytest.raises(TypeError, match="not JSON serializable"):
        _body.encode({"model": "m", "when": object()})


def test_a_data_url_shows_without_its_bytes_and_reads_as_its_url() -> None:
    url = data_url("image/png", b"\x89PNG")
    assert isinstance(url, DataUrl) and str(url) == "data:image/png;base64,iVBORw=="
    assert "iVBOR" not in repr(url)  # logs and errors never carry the image


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
