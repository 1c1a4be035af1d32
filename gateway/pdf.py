"""A PDF's text, read within a budget (SPEC 9; security review 2026-12-05, H-3).

pypdf bounds each content stream, but not a document: pages that share one heavy stream parse
it again each (a 156 KB file cost 5 s of CPU a page), and 20,000 blank pages are all walked.
Run in a worker thread, that work could not be stopped (``/stop``, the drain and a kill
-TERM all waited for it), held the GIL against the event loop, and was started again after a
restart. So a PDF is read by a child process of its own (``gateway._pdf_child``), one per
document, started with only ``PATH`` and ``PYTHONPATH`` of the gateway's environment (never
its secrets):

- it reads at most ``[agent] max_document_pages`` pages, and stops once its text passes
  ``max_document_chars``;
- it limits itself before it reads a byte: ``RLIMIT_CPU`` (``document_cpu_s``; the kernel
  ends it past that) and ``RLIMIT_AS`` (``document_memory_mb``: pypdf's allocations fail);
- the parent gives it twice its CPU budget in wall time, and kills it on that deadline and on
  any cancellation of the turn (``/stop``, an interrupting message, the drain's deadline);
- it writes each page's text as it goes (one JSON line a page), so whatever was read before
  the budget ran out is still used, and said to be partial.

The caller stores the outcome on the attachment's reference (text and notes), so a document
that blew its budget is never read again: neither a re-run nor a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

_KILLED = (-signal.SIGXCPU, -signal.SIGKILL)  # the CPU limit's signals, and our kill

#: How a reading ended: every page read, the page cap, the character cap, the budget (CPU,
#: memory or wall time), or a PDF that pypdf could not parse.
Ending = Literal["done", "pages", "chars", "budget", "unreadable"]
_ENDINGS: dict[str, Ending] = {
    "done": "done",
    "pages": "pages",
    "chars": "chars",
    "unreadable": "unreadable",
}


@dataclass(frozen=True, slots=True)
class PdfBudget:
    """What one document may cost: pages, characters, CPU seconds, memory."""

    max_pages: int = 500
    max_chars: int = 100_000
    cpu_s: float = 30.0
    memory_mb: int = 1024

    @property
    def wall_s(self) -> float:
        """The child's deadline: twice its CPU, for a machine busy with other work."""
        return 2 * self.cpu_s

    def describe(self) -> str:
        return f"{self.cpu_s:g} s of CPU, {self.memory_mb} MiB of memory"


@dataclass(frozen=True, slots=True)
class PdfText:
    """What was read: the pages' text (joined by newlines), how many pages of how many
    (``total`` None: the reader failed before counting them), and why it ended."""

    text: str
    read: int
    total: int | None
    ending: Ending
    detail: str = ""  # for "unreadable": the parser's exception name


async def read_pdf(data: bytes, budget: PdfBudget) -> PdfText:
    """Read ``data`` in a child process within ``budget``. Cancellation kills the child."""
    command = [
        sys.executable,
        "-m",
        "gateway._pdf_child",
        f"{budget.cpu_s:g}",
        str(budget.memory_mb),
        str(budget.max_pages),
        str(budget.max_chars),
    ]
    pages: list[str] = []
    total: int | None = None
    end, detail = "", ""
    # A page's text is cut at max_chars by the child; JSON spends at most 6 bytes a character.
    longest = 6 * budget.max_chars + 1024
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}
    process: anyio.abc.Process | None = None
    with anyio.move_on_after(budget.wall_s) as deadline:
        try:
            process = await anyio.open_process(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:  # no process to be had (EAGAIN, ENOMEM): not read, not kept
            return PdfText("", 0, None, "unreadable", f"the reader did not start ({exc})")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process, data)
                assert process.stdout is not None
                lines = BufferedByteReceiveStream(process.stdout)
                while not end:
                    try:
                        line = json.loads(await lines.receive_until(b"\n", longest))
                    except (anyio.IncompleteRead, anyio.EndOfStream, anyio.DelimiterNotFound):
                        break  # the child ended, or was ended, without its last line
                    except ValueError:
                        end = "garbled"
                        break
                    if "pages" in line:
                        total = int(line["pages"])
                    elif "text" in line:
                        pages.append(str(line["text"]))
                    else:
                        end, detail = str(line.get("end")), str(line.get("detail", ""))
            await process.wait()
        finally:
            await _end(process)
    code = process.returncode if process is not None else None
    ending = _ENDINGS.get(end)
    if ending is None and (end == "memory" or deadline.cancelled_caught or code in _KILLED):
        ending = "budget"
    elif ending is None:  # it crashed: not the document's budget, and not worth a retry either
        ending, detail = "unreadable", f"the reader exited with {code}"
    return PdfText("\n".join(pages), len(pages), total, ending, detail)


async def _feed(process: anyio.abc.Process, data: bytes) -> None:
    assert process.stdin is not None
    try:
        await process.stdin.send(data)
        await process.stdin.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the child ended before it read everything: its exit says why


async def _end(process: anyio.abc.Process) -> None:
    """Kill the child unless it has exited, and reap it, whatever cancelled the reading."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                process.kill()
        await process.aclose()
