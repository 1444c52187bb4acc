"""Documentation that runs as written -- and again (issue 28.8).

Every ``python`` code block of ``README.md`` and ``docs/*.md`` runs, and every ``bash runnable``
block: in order, in one fresh temporary folder per document (a block may use the files earlier
blocks of its document wrote), with the ``privembed`` of this environment on the ``PATH``; each
must exit 0. Then the document's Python blocks run a second time in the same folder, so a block
that works only once (a key file it creates, an output it refuses to replace) fails.

A Python block that needs what this machine does not have (a running server, a cluster, an API
key, the network) is skipped by a comment on the line just before it, with its reason::

    <!-- docs-test: skip (needs a running privembed server) -->

Skips are reported (one skipped test each, with the reason) and capped by :data:`MAX_SKIPS`.
Bash blocks are opt-in: ```` ```bash runnable ```` instead of ```` ```bash ````. Data comes
from what ships offline: the documents write it themselves (gensim's Lee corpus, synthetic
notes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->\s*$")
ANY_SKIP = re.compile(r"docs-test:\s*skip")
#: seconds one block may take (a runnable block should take a few)
BLOCK_TIMEOUT = 180
#: the most Python blocks the documents may skip (keep them few and honest)
MAX_SKIPS = 5


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    code: str
    skip: str | None = None  # the reason, for a Python block marked to be skipped

    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The Python blocks and the ``bash runnable`` blocks of ``path``, in order; a skip marker
    that is not just before a Python block is an error."""
    text = path.read_text(encoding="utf-8")
    out = []
    used: set[int] = set()
    for m in FENCE.finditer(text):
        words = m.group("info").split()
        line = text.count("\n", 0, m.start()) + 1
        if len(words) >= 2 and "runnable" in words[1:] and words[0] not in ("bash", "python"):
            raise ValueError(f"{path.name}:{line}: runnable blocks are bash or python: {words}")
        if words[:1] == ["python"]:
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = SKIP.search(before)
            if mark is not None:
                used.add(line - 2)
            reason = None if mark is None else mark.group("reason").strip()
            if mark is not None and not reason:
                raise ValueError(f"{path.name}:{line}: a docs-test skip needs a reason")
            out.append(Block(path, line, "python", m.group("body"), reason))
        elif words[:2] == ["bash", "runnable"]:
            out.append(Block(path, line, "bash", m.group("body")))
    for i, raw in enumerate(text.splitlines()):
        if ANY_SKIP.search(raw) and i not in used:
            raise ValueError(
                f"{path.name}:{i + 1}: a docs-test skip marker must be the line just before a "
                "```python block, as <!-- docs-test: skip (reason) -->"
            )
    return out


def runnable_blocks(path: Path) -> list[Block]:
    """The blocks of ``path`` that run (skipped Python blocks left out), in order."""
    return [b for b in blocks(path) if b.skip is None]


MARKED = [p for p in DOCUMENTS if runnable_blocks(p)]
SKIPPED = [b for p in DOCUMENTS for b in blocks(p) if b.skip is not None]


def test_the_readme_and_the_integrations_guide_have_runnable_examples():
    names = {p.name for p in MARKED}
    assert {"README.md", "integrations.md"} <= names, names


def test_the_marker_is_found():
    found = runnable_blocks(REPO / "README.md")
    assert found and found[0].language == "python" and "notes.jsonl" in found[0].code


def test_every_python_block_runs_unless_skipped_with_a_reason(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "```python\nprint(1)\n```\n\n<!-- docs-test: skip (needs a server) -->\n```python\n"
        "print(2)\n```\n\n```bash\nrm -rf /\n```\n\n```bash runnable\necho 3\n```\n"
    )
    got = [(b.language, b.code.strip(), b.skip) for b in blocks(doc)]
    assert got == [("python", "print(1)", None), ("python", "print(2)", "needs a server"),
                   ("bash", "echo 3", None)]  # fmt: skip
    doc.write_text("<!-- docs-test: skip (stray) -->\n\ntext\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="just before"):
        blocks(doc)
    doc.write_text("<!-- docs-test: skip () -->\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        blocks(doc)


def test_skips_are_few():
    assert len(SKIPPED) <= MAX_SKIPS, [f"{b.where()}: {b.skip}" for b in SKIPPED]


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where() for b in SKIPPED])
def test_skipped_block(block):
    """One skipped test per skipped block, so that the run reports them with their reasons."""
    pytest.skip(f"{block.where()}: {block.skip}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["COLUMNS"] = "100"
    env.pop("PRIVEMBED_DEBUG", None)
    return env


def run_block(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    if block.language == "bash":
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        cmd = [sys.executable, "-c", block.code]
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )


def _check(block: Block, r: subprocess.CompletedProcess[str], when: str) -> None:
    assert r.returncode == 0, (
        f"{block.where()} ({block.language}, {when}) exited {r.returncode}\n--- block ---\n"
        f"{block.code}\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-3000:]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("document", MARKED, ids=[p.name for p in MARKED])
def test_runnable_blocks_run_as_written_and_again(document, tmp_path):
    found = runnable_blocks(document)
    for block in found:
        _check(block, run_block(block, tmp_path), "first run")
    for block in found:
        if block.language == "python":
            _check(block, run_block(block, tmp_path), "second run in the same folder")


# ---- every documented command line parses ---------------------------------------------------

#: documents left out of the check (none: every document is kept in step with its commands)
_NOT_CHECKED: set[str] = set()


def command_lines(path: Path) -> list[tuple[int, list[str]]]:
    """``privembed ...`` lines of the code blocks of ``path`` (continuations joined; comments,
    ``$`` prompts and pipes dropped), as argument lists; lines with ``...`` are skipped."""
    import shlex

    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group("info").split()[:1] in (["python"], ["toml"], ["json"]):
            continue
        start = text.count("\n", 0, m.start()) + 2
        joined: list[tuple[int, str]] = []
        for i, raw in enumerate(m.group("body").splitlines()):
            line = raw.rstrip()
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((start + i, line.strip()))
        for lineno, line in joined:
            line = line.removeprefix("$ ")
            if not line.startswith("privembed ") or "..." in line:
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            for stop in ("|", ">", "<", "&&", ";", "&"):
                if stop in words:
                    words = words[: words.index(stop)]
            out.append((lineno, words[1:]))
    return out


LINES = [
    (f"{p.name}:{n}", args)
    for p in DOCUMENTS
    if p.name not in _NOT_CHECKED
    for n, args in command_lines(p)
]


@pytest.mark.parametrize(("where", "args"), LINES, ids=[w for w, _ in LINES])
def test_every_documented_command_line_parses(where, args):
    """Options, choices and value types of every ``privembed`` line in the docs are what the
    command accepts (parsed, not run)."""
    import typer

    from privembed.cli import app

    cmd: Any = typer.main.get_command(app)
    if args in (["--version"], ["-V"]):
        return
    path = ["privembed"]
    while getattr(cmd, "commands", None) and args and args[0] in cmd.commands:
        path.append(args[0])
        cmd, args = cmd.commands[args[0]], args[1:]
    assert not getattr(cmd, "commands", None), f"{where}: no such command {' '.join(path)}"
    if "--help" in args:
        return
    cmd.make_context(" ".join(path), list(args))
