"""PDFs for tests: a minimal valid one-page PDF whose text a PDF reader (pypdf) extracts, and
the hostile shapes of the 2026-12-05 security review (H-3): many pages sharing one content
stream that is expensive to parse but shows almost no text, and many blank pages."""

from __future__ import annotations

import zlib

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _pdf(objects: list[bytes]) -> bytes:
    """The objects numbered from 1 (the first the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _stream(raw: bytes) -> bytes:
    packed = zlib.compress(raw, 9)
    return (
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream"
    )


def pdf_with_text(text: str) -> bytes:
    """One page showing ``text`` (ASCII, one line) in Helvetica."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            b" /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
            _FONT,
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        ]
    )


def pdf_heavy_pages(pages: int, tokens: int = 1_900_000) -> bytes:
    """``pages`` pages sharing one content stream of ``tokens`` operators that show nothing
    but one "A" (under pypdf's 2M-token budget a stream): every page parses it again, about
    5 s of CPU a page, from a file of a few KB (the review's ``pdfbomb.py sharedops``)."""
    raw = b"q Q\n" * (tokens // 2) + b"BT /F1 1 Tf (A) Tj ET\n"
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] /Contents 3 0 R"
        b" /Resources << /Font << /F1 4 0 R >> >> >>"
    )
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
            _stream(raw),
            _FONT,
            *[page] * pages,
        ]
    )


def pdf_blank_pages(pages: int, text_every: int = 0) -> bytes:
    """``pages`` pages with nothing on them (2.5 MB for 20,000); with ``text_every``, every
    such page (the first included) shows its number instead, so what was read is visible."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, once the pages' numbers are known
        _FONT,
    ]
    kids = []
    for i in range(pages):
        if text_every and i % text_every == 0:
            stream = b"BT /F1 12 Tf 72 720 Td (page %d) Tj ET" % (i + 1)
            objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
            objects.append(
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
                b" /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
            )
        else:
            objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>")
        kids.append(b"%d 0 R" % len(objects))  # the page: the last object added
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % pages
    return _pdf(objects)
