"""Render the suite's JSON as the Markdown tables of docs/BENCHMARKS.md.

.venv/bin/python -m tests.bench.report docs/benchmarks.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _cell(stat: dict[str, float], digits: int = 1) -> str:
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render(data: dict[str, Any]) -> str:
    out: list[str] = []
    machine = data.get("machine", {})
    out.append(
        f"Machine: {machine.get('cores')} cores, Python {machine.get('python')}; "
        f"medians of {data.get('repeat')} runs, (min-max) in brackets."
    )
    if "throughput" in data:
        rows = []
        for n, r in data["throughput"].items():
            ceiling = data.get("ceiling", {}).get(n)
            rows.append(
                [
                    n,
                    _cell(r["turns_per_s"]),
                    _cell(ceiling["turns_per_s"]) if ceiling else "",
                    f"{r['turns_per_s']['median'] / ceiling['turns_per_s']['median']:.2f}"
                    if ceiling
                    else "",
                    _cell(r["p50_ms"], 2),
                    _cell(ceiling["p50_ms"], 2) if ceiling else "",
                    _cell(r["p99_ms"]),
                    _cell(r["cpu_ms_per_turn"], 2),
                    _cell(r["peak_rss_mb"]),
                ]
            )
        out.append("\n### Throughput and latency, instant model\n")
        out.append(
            _table(
                [
                    "conversations",
                    "botmux turns/s",
                    "direct client calls/s",
                    "ratio",
                    "botmux p50 ms",
                    "direct p50 ms",
                    "botmux p99 ms",
                    "gateway CPU ms/turn",
                    "peak RSS MB",
                ],
                rows,
            )
        )
    if "latency500" in data:
        rows = []
        for n, r in data["latency500"].items():
            b, d = r["botmux"], r["direct"]
            rows.append(
                [
                    n,
                    _cell(b["turns_per_s"]),
                    _cell(d["turns_per_s"]),
                    _cell(b["p50_ms"]),
                    _cell(d["p50_ms"]),
                    _cell(b["cpu_ms_per_turn"], 2),
                ]
            )
        out.append("\n### A 500 ms model\n")
        out.append(
            _table(
                [
                    "conversations",
                    "botmux turns/s",
                    "direct calls/s",
                    "botmux p50 ms",
                    "direct p50 ms",
                    "gateway CPU ms/turn",
                ],
                rows,
            )
        )
    if "hermes" in data:
        rows = []
        for n, r in data["hermes"].items():
            h, b = r["hermes"], r["botmux"]
            rows.append(
                [
                    n,
                    _cell(b["turns_per_s"]),
                    _cell(h["turns_per_s"], 2),
                    f"{r['ratio_turns_per_s']:.0f}x",
                    _cell(b["p50_ms"]),
                    _cell(h["p50_ms"], 0),
                    _cell(b["cpu_ms_per_turn"], 2),
                    _cell(h["cpu_ms_per_turn"], 0),
                    _cell(b["peak_rss_mb"]),
                    _cell(h["peak_rss_mb"]),
                ]
            )
        out.append("\n### Side by side with hermes-agent 0.19.0 (`/v1/chat/completions`)\n")
        out.append(
            _table(
                [
                    "clients",
                    "botmux turns/s",
                    "hermes turns/s",
                    "botmux/hermes",
                    "botmux p50 ms",
                    "hermes p50 ms",
                    "botmux CPU ms/turn",
                    "hermes CPU ms/turn",
                    "botmux peak RSS MB",
                    "hermes peak RSS MB",
                ],
                rows,
            )
        )
    simple = {
        "store": "The store under the 50-conversation load",
        "startup": "Start-up",
        "idle": "Idle conversations",
        "telegram": "Telegram inbound (50 private chats, instant model)",
        "discord": "Discord inbound (50 DMs, instant model)",
    }
    for key, title in simple.items():
        if key in data:
            out.append(f"\n### {title}\n")
            out.append(
                _table(
                    ["figure", "median (min-max)"], [[k, _cell(v, 2)] for k, v in data[key].items()]
                )
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
