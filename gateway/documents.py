"""A document attachment's kind and text (SPEC 9): which documents botmux reads (text types
and PDFs), and a text document's text, cut at ``[agent] max_document_chars`` with a note;
other types are not read.

Pure functions of the bytes (a 20 MiB decode is run in a worker thread by the turn). A PDF's
text is ``gateway.pdf``'s: read in a child process within a budget, pypdf imported there only.
"""

from __future__ import annotations

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
    """The text of a text document, at most ``limit`` characters (a note says when it was
    cut), and whether it was cut. Raises :class:`Unreadable` for any other type (a PDF is
    read by ``gateway.pdf``, within its budget)."""
    if not is_text(name, content_type):
        raise Unreadable(f"{content_type or 'unknown type'} is not a text document")
    text = data.decode("utf-8", errors="replace")
    if len(text) > limit:
        return f"{text[:limit]}\n[the document was cut at {limit} characters]", True
    return text, False
