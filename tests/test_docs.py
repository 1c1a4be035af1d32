"""The docs cannot drift quietly (issue 33): every module of ``gateway/``, ``platforms/``,
``agent/`` and ``policy/`` has a row in docs/ARCHITECTURE.md's module table, every repository
path the documents name exists, and every ``Class.member`` of ours they name is one.

The table's rule, as ARCHITECTURE says above it. A row's first cell names modules and packages
by path, in backticks: ``gateway/ledger.py``, then ``access.py``, a name without a top-level
package being in the directory of the path before it. A row whose first cell names a package
(``platforms/telegram/``) is that package's: the modules it names in backticks in its first
two cells (``_poller``, ``_poller.py``, or ``slack/render.py`` below the package) are covered.
Nothing else is: naming a package covers neither a module the row does not name nor the
modules of its sub-packages. ``__init__.py`` is the package itself, and needs no row.

The documents: README.md, docs/*.md, tests/README.md and every file of deploy/. A path is a
word starting with a top-level directory (``gateway/``, ``tests/``, ``docs/``, ...), with or
without backticks (a glob must match something; ``<name>`` is a placeholder), a Markdown link
(its ``#anchor`` too: a heading of the target) or a ``python -m`` module. A ``Class.member``
in backticks, where the class is one of ours, must be a member of it (its bases' included);
the documents whose past is their point (BENCHMARKS-HISTORY.md) are checked for paths only.

Pure and fast: it reads files and starts nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
TABLE_HEADING = "## Modules and the direction of dependencies"

#: The packages every module of which needs a row in the table.
MODULE_ROOTS = ("gateway", "platforms", "agent", "policy")
#: The top-level directories a path the documents name may start with.
PATH_ROOTS = (*MODULE_ROOTS, "tests", "deploy", "docs")
#: Documents whose past is their point: what they name may be gone (checked for paths only).
HISTORY = ("BENCHMARKS-HISTORY.md",)

PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(PATH_ROOTS)})/[\w./*<>-]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")
RUN_MODULE = re.compile(rf"-m ((?:{'|'.join(PATH_ROOTS)})(?:\.\w+)*)")
CODE = re.compile(r"`([^`\n]+)`")
#: ``Class.member`` in code; a library's class is named with its module (``telegram.Message``),
#: and is not checked.
MEMBER = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]*)\.([a-z_][A-Za-z0-9_]*)")


# -- the module table ------------------------------------------------------------------------


def modules() -> set[str]:
    """Every module the table must name, as a path from the repository's root."""
    return {
        path.relative_to(ROOT).as_posix()
        for root in MODULE_ROOTS
        for path in (ROOT / root).rglob("*.py")
        if path.name != "__init__.py"
    }


def cells(line: str) -> list[str]:
    """A table row's cells (a ``|`` inside backticks is text, not a border)."""
    found, cell, code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            found.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*found, cell.strip()]


def table(text: str) -> list[list[str]]:
    """The module table's rows, below its heading (its header and rule left out)."""
    lines = text.split(TABLE_HEADING, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return rows


def is_rooted(name: str) -> bool:
    return name.split("/", 1)[0] in MODULE_ROOTS and "/" in name


def row_names(row: list[str]) -> tuple[list[str], set[str]]:
    """The paths the row's first cell names (each as given, resolved), and what it covers:
    those, and for a package's row the modules named in its first two cells."""
    named: list[str] = []
    directory = ""
    for token in CODE.findall(row[0]):
        path = token if is_rooted(token) else directory + token
        directory = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        named.append(path)
    covered = set(named)
    tokens = CODE.findall(" ".join(row[:2]))
    for package in (p for p in named if p.endswith("/")):
        for token in tokens:
            if not is_rooted(token):
                covered.update({package + token, f"{package}{token}.py"})
            elif token.startswith(package):
                covered.add(token)
    return named, covered


def test_every_module_has_a_row_in_the_architecture_table() -> None:
    rows = table(ARCHITECTURE.read_text())
    assert len(rows) > 10, "the module table was not found under its heading"
    covered: set[str] = set()
    for row in rows:
        covered |= row_names(row)[1]
    missing = sorted(modules() - covered)
    assert not missing, (
        "docs/ARCHITECTURE.md's module table has no row naming these (add them to a row, "
        "with what each is for; the rule is in the test's docstring): " + ", ".join(missing)
    )


def test_every_path_the_architecture_table_names_exists() -> None:
    stale = []
    for row in table(ARCHITECTURE.read_text()):
        for path in row_names(row)[0]:
            if not (path.endswith((".py", "/")) and (ROOT / path).exists()):
                stale.append(path)
    assert not stale, f"the module table names what is not there: {stale}"


# -- paths in the documents -----------------------------------------------------------------


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "tests" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()),
    ]


def where(doc: Path, text: str, at: int) -> str:
    return f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, at) + 1}"


def anchors(doc: Path) -> set[str]:
    """The ``#anchors`` of ``doc``'s headings, as GitHub makes them."""
    found: set[str] = set()
    fenced = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def missing_paths(doc: Path, text: str) -> Iterator[str]:
    """What ``text`` (of ``doc``) names that is not in the repository."""
    for match in PATH.finditer(text):
        path = match.group(0).rstrip(".,:;")
        if "<" in path:  # a placeholder: tests/test_<what it tests>.py
            continue
        exists = any(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()
        if not exists:
            yield f"{where(doc, text, match.start())}: {path}"
    for match in LINK.finditer(text):
        target, _, anchor = match.group(1).partition("#")
        if re.match(r"[a-z]+:|<", target):  # a URL, or a placeholder
            continue
        linked = (doc.parent / target).resolve() if target else doc
        if not linked.exists():
            yield f"{where(doc, text, match.start())}: link to {match.group(1)}"
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            yield f"{where(doc, text, match.start())}: no heading #{anchor} in {target or doc.name}"
    for match in RUN_MODULE.finditer(text):
        module = ROOT / match.group(1).replace(".", "/")
        if not (module.with_suffix(".py").exists() or (module / "__init__.py").exists()):
            yield f"{where(doc, text, match.start())}: python -m {match.group(1)}"


def test_every_path_the_documents_name_exists() -> None:
    missing = [m for doc in documents() for m in missing_paths(doc, doc.read_text())]
    assert not missing, "the documents name paths that are not there:\n" + "\n".join(missing)


# -- Class.member ------------------------------------------------------------------------------


def members() -> dict[str, set[str]]:
    """Our classes (by name, across modules) and their members, their bases' included."""
    found: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    for root in MODULE_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ClassDef):
                    continue
                own = found.setdefault(node.name, set())
                bases.setdefault(node.name, set()).update(
                    b.id for b in node.bases if isinstance(b, ast.Name)
                )
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        own.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        own.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        own.update(t.id for t in item.targets if isinstance(t, ast.Name))
                own.update(
                    n.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                    and isinstance(n.ctx, ast.Store)
                )

    def inherited(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        own = set(found.get(name, ()))
        for base in bases.get(name, set()) - seen:
            own |= inherited(base, seen | {name})
        return own

    return {name: inherited(name) for name in found}


def wrong_members(doc: Path, text: str, ours: dict[str, set[str]]) -> Iterator[str]:
    """The ``Class.member`` in ``text``'s code whose class is ours and has no such member."""
    for code in CODE.finditer(text):
        for cls, member in MEMBER.findall(code.group(1)):
            if cls in ours and member not in ours[cls]:
                yield f"{where(doc, text, code.start())}: {cls}.{member}"


def test_every_member_of_our_classes_the_documents_name_exists() -> None:
    ours = members()
    wrong = [
        m
        for doc in documents()
        if doc.suffix == ".md" and doc.name not in HISTORY
        for m in wrong_members(doc, doc.read_text(), ours)
    ]
    assert not wrong, "the documents name members our classes do not have:\n" + "\n".join(wrong)


# -- the checks themselves ---------------------------------------------------------------------


def test_the_table_rule_reads_each_form() -> None:
    row = cells(
        "| `gateway/ledger.py`, `access.py`, `store/schedules.py`, `platforms/peer/admin.py`"
        " | text `X | Y` | none |"
    )
    assert len(row) == 3
    named, covered = row_names(row)
    assert named == [
        "gateway/ledger.py",
        "gateway/access.py",
        "gateway/store/schedules.py",
        "platforms/peer/admin.py",
    ]
    assert covered == set(named)
    package = cells(
        "| `platforms/` | shared: `_courier` (the outbox), `_http.py`, Slack's `slack/render.py`,"
        " `platforms/_text.py`, `agent/_wire.py` | `_notices` |"
    )
    assert row_names(package)[1] == {
        "platforms/",
        "platforms/_courier",
        "platforms/_courier.py",
        "platforms/_http.py",
        "platforms/_http.py.py",
        "platforms/slack/render.py",
        "platforms/slack/render.py.py",
        "platforms/_text.py",
    }  # not agent/_wire.py (not below it), not _notices (the third cell)


def test_the_path_check_sees_each_form(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "ARCHITECTURE.md"  # its headings answer the anchors
    text = (
        "`gateway/nowhere.py` and gateway/actor.py. See docs/NOWHERE.md, `platforms/*/nope.py`,"
        " `platforms/*/adapter.py`, tests/test_<what>.py, [a](ARCHITECTURE.md#the-store),"
        " [b](ARCHITECTURE.md#no-such-heading), [c](gone.md), [d](https://example.com/x),"
        " python -m tests.bench.nowhere, python -m tests.bench.suite"
    )
    found = [m.split(": ", 1)[1] for m in missing_paths(doc, text)]
    assert found == [
        "gateway/nowhere.py",
        "docs/NOWHERE.md",
        "platforms/*/nope.py",
        "no heading #no-such-heading in ARCHITECTURE.md",
        "link to gone.md",
        "python -m tests.bench.nowhere",
    ]


def test_the_member_check_sees_each_form() -> None:
    text = (
        "`Store.submit`, `Store.admit`, `SessionActor.send` (from `Actor`),"
        " `telegram.Message.de_json` (a library's), `Message.de_json`, `Nobody.knows`"
    )
    found = [m.split(": ", 1)[1] for m in wrong_members(ARCHITECTURE, text, members())]
    assert found == ["Store.admit", "Message.de_json"]
