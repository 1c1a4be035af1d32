"""The child process that reads one PDF for ``gateway.pdf`` (``python -m gateway._pdf_child
CPU_S MEMORY_MB MAX_PAGES MAX_CHARS``, the PDF on stdin).

It limits itself before it reads a byte (``RLIMIT_CPU``: the kernel ends it past its CPU
seconds; ``RLIMIT_AS``: allocations past its memory fail), then writes one JSON line with the
page count, one per page read (its text), and a last one saying how it ended: ``done``,
``pages`` (the page cap), ``chars`` (the character cap), ``unreadable`` (with the parser's
exception name) or ``memory``. Killed, it writes no last line; the parent tells why from its
exit. Only the standard library and pypdf are imported here: the child starts in ~0.2 s.
"""

from __future__ import annotations

import io
import json
import logging
import math
import resource
import signal
import sys
from typing import BinaryIO


def limit_self(cpu_s: float, memory_mb: int) -> None:
    cpu = max(1, math.ceil(cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, a second later SIGKILL
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def emit(out: BinaryIO, **fields: object) -> None:
    out.write((json.dumps(fields, ensure_ascii=False) + "\n").encode())
    out.flush()


def read(data: bytes, out: BinaryIO, max_pages: int, max_chars: int) -> None:
    import pypdf  # only here: the limits are set, and most children never get this far
    from pypdf.errors import PyPdfError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        total = len(reader.pages)
        emit(out, pages=total)
        length = 0
        for number in range(min(total, max_pages)):
            text = (reader.pages[number].extract_text() or "")[: max_chars + 1 - length]
            length += len(text) + 1
            emit(out, text=text)
            if length > max_chars:
                emit(out, end="chars")
                return
        emit(out, end="pages" if total > max_pages else "done")
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        emit(out, end="unreadable", detail=type(exc).__name__)


def main(argv: list[str]) -> int:
    cpu_s, memory_mb = float(argv[0]), int(argv[1])
    max_pages, max_chars = int(argv[2]), int(argv[3])
    limit_self(cpu_s, memory_mb)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # the parent gone: end quietly
    logging.disable(logging.CRITICAL)  # pypdf warns per broken object: nobody reads them here
    out = sys.stdout.buffer
    try:
        read(sys.stdin.buffer.read(), out, max_pages, max_chars)
    except MemoryError:
        emit(out, end="memory")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
