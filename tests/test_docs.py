"""Documentation that runs as written.

Every fenced code block of ``README.md`` and ``docs/*.md`` whose info string is
``bash runnable`` or ``python runnable`` is run, in order, in one fresh temporary folder per
document (a block may use the files earlier blocks of its document wrote), with the ``privembed``
of this environment on the ``PATH``; each must exit 0. Blocks that need what this machine does
not have (a GPU, a hub download, an API key, a long run) are left unmarked. Data comes from what
ships offline: the documents write it themselves (gensim's Lee corpus, synthetic notes).

To mark a block, write ```` ```bash runnable ```` (or ``python runnable``) instead of
```` ```bash ````; renderers still highlight it as bash.
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
#: seconds one block may take (a runnable block should take a few)
BLOCK_TIMEOUT = 180


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    code: str

    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    """The blocks of ``path`` marked ``bash runnable`` / ``python runnable``, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        words = m.group("info").split()
        if len(words) >= 2 and "runnable" in words[1:]:
            if words[0] not in ("bash", "python"):
                raise ValueError(f"{path.name}: runnable blocks are bash or python, got {words}")
            line = text.count("\n", 0, m.start()) + 1
            out.append(Block(path, line, words[0], m.group("body")))
    return out


MARKED = [p for p in DOCUMENTS if runnable_blocks(p)]


def test_the_readme_and_the_integrations_guide_have_runnable_examples():
    names = {p.name for p in MARKED}
    assert {"README.md", "integrations.md"} <= names, names


def test_the_marker_is_found():
    blocks = runnable_blocks(REPO / "README.md")
    assert blocks and blocks[0].language == "python" and "notes.jsonl" in blocks[0].code


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


@pytest.mark.slow
@pytest.mark.parametrize("document", MARKED, ids=[p.name for p in MARKED])
def test_runnable_blocks_run_as_written(document, tmp_path):
    for block in runnable_blocks(document):
        r = run_block(block, tmp_path)
        assert r.returncode == 0, (
            f"{block.where()} ({block.language}) exited {r.returncode}\n--- block ---\n"
            f"{block.code}\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-3000:]}"
        )


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
