"""Libraries a gateway may not need are not imported at start (issue 20: idle memory).

openai (with httpx2, ~14 MB resident) loads at start only when a model (or transcription) is
configured; pypdf (with cryptography, ~12 MB) at the first PDF; the chat platforms' libraries
only with their platform. Checked in a fresh interpreter, as ``botmux run`` imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
import gateway.app, gateway.cli
from agent.clients import ClientPool
heavy = ("openai", "httpx2", "pypdf", "telegram", "discord", "cryptography")
print(",".join(m for m in heavy if m in sys.modules))
ClientPool.load_library()
print("openai" in sys.modules and "openai.types.chat" in sys.modules)
"""


def test_the_gateway_imports_no_model_library_or_pdf_reader_at_start() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded, after = done.stdout.splitlines()
    assert loaded == ""
    assert after == "True"  # what a configured model loads at start
