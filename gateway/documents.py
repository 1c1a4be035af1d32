"""A document attachment's text (SPEC 9): text types decoded, PDF text extracted with pypdf,
both cut at ``[agent] max_document_chars`` with a note; other types are not read.

Pure functions of the bytes; the PDF extraction is CPU work, so the turn runs it in a
worker thread (``anyio.to_thread``). pypdf (with cryptography and xml, ~12 MB resident) is
imported at the first PDF, in that thread, not at start.
"""

from __future__ import annotations

import io
import logging

log = logging.getLogger(__name__)

#: Types that are text whatever their MIME prefix (JSON, source code, config, markup).
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/x-ndjson",
    }
)
_TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".md",
        ".rst",
        ".csv",
        ".tsv",
        ".json",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".xml",
        ".html",
        ".htm",
        ".log",
        ".py",
        ".js",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".c",
        ".h",
        ".cpp",
        ".hpp",
        ".cs",
        ".go",
        ".rs",
        ".rb",
        ".php",
        ".sh",
        ".sql",
        ".kt",
        ".swift",
        ".css",
    ]
)


class Unreadable(Exception):
    """The document's text could not be read (a broken PDF, a binary type)."""


def is_pdf(name: str, content_type: str) -> bool:
    return content_type == "application/pdf" or name.lower().endswith(".pdf")


def is_text(name: str, content_type: str) -> bool:
    kind = content_type.partition(";")[0].strip().lower()
    if kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return True
    dot = name.rfind(".")
    return (
        dot >= 0
        and name[dot:].lower() in _TEXT_SUFFIXES
        and kind in ("", "application/octet-stream")
    )


def readable(name: str, content_type: str) -> bool:
    """Whether botmux reads this document's text at all."""
    return is_pdf(name, content_type) or is_text(name, content_type)


def document_text(name: str, content_type: str, data: bytes, limit: int) -> tuple[str, bool]:
    """The text of the document, at most ``limit`` characters (a note says when it was cut),
    and whether it was cut. Raises :class:`Unreadable` when it has no readable text."""
    if is_pdf(name, content_type):
        text = _pdf_text(data, limit)
    elif is_text(name, content_type):
        text = data.decode("utf-8", errors="replace")
    else:
        raise Unreadable(f"{content_type or 'unknown type'} is not a text document")
    if len(text) > limit:
        return f"{text[:limit]}\n[the document was cut at {limit} characters]", True
    return text, False


def _pdf_text(data: bytes, limit: int) -> str:
    import pypdf  # at the first PDF: most gateways never read one
    from pypdf.errors import PyPdfError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages: list[str] = []
        length = 0
        for page in reader.pages:  # stop once past the limit: a 900-page PDF is not all read
            pages.append(page.extract_text() or "")
            length += len(pages[-1]) + 1
            if length > limit:
                break
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"the PDF could not be read: {type(exc).__name__}") from exc
    return "\n".join(pages)
