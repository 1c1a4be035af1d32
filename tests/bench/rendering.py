"""What rendering a reply costs: each platform's render (parse, write, cut) of a typical 2 KB
answer and of a 30 KB one, in milliseconds per reply (median and range over rounds).

Render runs once per reply, on the event loop. The answers are the Markdown corpus's
(tests/corpus/markdown): a 2 KB one (a table, nested lists, quotes, headings) and a 30 KB
one (every corpus answer, the long code block among them). ``--tree`` measures another
checkout's renderers on the same answers (before markdown-it-py: the regex converter for
Telegram, the model's text passed through to Discord, no Slack):

    .venv/bin/python -m tests.bench.rendering [--rounds 30] [--tree /path/to/checkout]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from tests.bench._figures import spread

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "markdown"
TYPICAL = ("table_sales", "nested_lists", "quotes", "headings")


def answers() -> dict[str, str]:
    read = {p.stem: p.read_text() for p in sorted(CORPUS.glob("*.md"))}
    typical = "\n\n".join(read[name] for name in TYPICAL)
    shorts = "\n\n".join(text for name, text in read.items() if name != "long_code")
    long = read["long_code"]
    while len((long + shorts).encode()) < 30_000:
        long = shorts + "\n\n" + long
    return {"2 KB": typical, "30 KB": long}


def renderers(tree: Path) -> dict[str, Callable[[str], list[str]]]:
    """What ``tree`` has: the markdown-it renderers, or the converters before them."""

    def load(name: str) -> ModuleType | None:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            return None
        # The editable install would find a module the tree lacks in this checkout.
        return module if Path(str(module.__file__)).is_relative_to(tree) else None

    found: dict[str, Callable[[str], list[str]]] = {}
    for name, module, function in (
        ("telegram", "platforms.telegram.render", "render"),
        ("discord", "platforms.discord.render", "render"),
        ("discord (pass-through)", "platforms.discord.convert", "render"),
        ("slack", "platforms.slack.render", "render"),
        ("(markdown-it parse alone)", "platforms._markdown", "parse"),
    ):
        loaded = load(module)
        if loaded is None or not hasattr(loaded, function):
            continue
        if name.startswith("discord") and "discord" in found:
            continue  # Discord's renderer where there is one, else the pass-through before it
        found[name] = getattr(loaded, function)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tree", help="a checkout whose renderers to measure instead")
    args = parser.parse_args()
    rounds = args.rounds
    tree = Path(args.tree or Path(__file__).parents[2]).resolve()
    sys.path.insert(0, str(tree))
    texts = answers()
    print(f"render per reply, ms (median [min .. max] over {rounds} rounds)")
    for size, text in texts.items():
        print(f"{size} answer ({len(text.encode()):,} bytes):")
        for name, render in renderers(tree).items():
            render(text)  # warm: imports, compiled patterns
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                render(text)
                times.append((time.perf_counter() - start) * 1000)
            print(f"  {name:28} {spread(times, width=7)}")


if __name__ == "__main__":
    main()
