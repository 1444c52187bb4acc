"""``make demo``'s environment runs every command of the README's "Command line" section (issue 40.1).

``make demo`` installs ``privembed[demo]`` and nothing else (into ``.venv-demo``); the README then
tells a newcomer to run the commands of its "Command line" section. After the demo, the first of
them failed: ``privembed embed notes.jsonl -o emb.parquet`` needed pyarrow, which the demo extra
did not install.

The tests rebuild the demo environment's view of the installed packages from this one: the
distributions that ``privembed[demo]`` requires, transitively (``pyproject.toml``'s extra, then
each installed distribution's own requirements, markers evaluated here), are linked into a folder
that is the only ``site-packages`` of a ``python -S`` process. Everything else of this
environment (Ray, LangChain, spaCy, pytest, ...) cannot be imported there, as after ``make demo``
-- and ``importlib.util.find_spec`` and ``importlib.metadata`` agree, so optional imports take the
path they take in the demo environment. The README section's blocks then run in that process, in
order, in one folder, as ``tests/test_docs_run_*.py`` run them; so does ``privembed demo``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.docs_blocks import FENCE

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
#: seconds one block (or the demo) may take
TIMEOUT = 600
#: what the demo environment must never carry (the README: no Ray, LangChain, spaCy or test tools)
NOT_IN_THE_DEMO = {"ray", "langchain-core", "spacy", "pytest", "ruff", "mypy", "chromadb"}


def demo_requirements(extra: str = "demo") -> list[Requirement]:
    """The requirements of ``privembed[extra]``, read from ``pyproject.toml`` (not from this
    environment's installed metadata, which is as old as the last install): the core
    dependencies and the extra, with ``privembed[...]`` self-references expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    out: list[Requirement] = [Requirement(r) for r in project["dependencies"]]
    todo, seen = [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in extras[name]:
            req = Requirement(text)
            if canonicalize_name(req.name) == "privembed":
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


def closure(requirements: list[Requirement]) -> set[str]:
    """The canonical names of the installed distributions ``requirements`` pull in,
    transitively (markers evaluated for this interpreter and the requested extras)."""
    found: set[str] = set()
    todo = [(r, "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in found:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise AssertionError(
                f"{req} (needed by privembed[demo]) is not installed in this environment"
            ) from None
        found.add(name)
        for text in dist.requires or []:
            sub = Requirement(text)
            for e in ("", *req.extras):
                if sub.marker is None or sub.marker.evaluate({"extra": e}):
                    todo.append((sub, e))
                    break
    return found


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The names a distribution installs at the top of site-packages (packages, modules,
    extension files, ``.libs`` folders, its ``.dist-info``)."""
    names = {
        Path(f).parts[0]
        for f in dist.files or []
        if not str(f).startswith("..") and Path(f).parts[0] != "__pycache__"
    }
    if not names:  # no RECORD: the packages it names and its metadata folder
        top = dist.read_text("top_level.txt") or ""
        names = {n.strip() for n in top.splitlines() if n.strip()}
        names.add(Path(str(dist._path)).name)  # type: ignore[attr-defined]
    return names


def demo_site(folder: Path) -> Path:
    """A folder of links to exactly the distributions of ``privembed[demo]`` (privembed itself
    runs from ``src/``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(closure(demo_requirements())):
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for entry in _top_level(dist):
            link = folder / entry
            if not link.exists() and (base / entry).exists():
                link.symlink_to(base / entry)
    return folder


def demo_env(tmp: Path) -> dict[str, str]:
    """Environment variables under which ``python`` and ``privembed`` see only the demo extra."""
    site = demo_site(tmp / "site-packages")
    bin_ = tmp / "bin"
    bin_.mkdir()
    python = bin_ / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    entry = "import sys; sys.argv[0] = 'privembed'; from _privembed_entry import main; main()"
    privembed = bin_ / "privembed"
    privembed.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S -c "{entry}" "$@"\n')
    for f in (python, privembed):
        f.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{SRC}{os.pathsep}{site}"
    env["COLUMNS"] = "100"
    env.pop("PRIVEMBED_DEBUG", None)
    return env


def command_line_blocks() -> list[tuple[int, str, str]]:
    """The runnable blocks of the README's "Command line" section: (line, language, code)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Command line\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    first = text.count("\n", 0, start) + 1
    out = []
    for m in FENCE.finditer(section):
        words = m.group("info").split()
        line = first + section.count("\n", 0, m.start())
        if words[:1] == ["python"]:
            out.append((line, "python", m.group("body")))
        elif words[:1] == ["bash"]:
            out.append((line, "bash", m.group("body")))
    return out


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _refused(stderr: str) -> str:
    """The modules a failed run could not import (its ImportError lines), for the message."""
    lines = [
        ln
        for ln in stderr.splitlines()
        if re.search(r"No module named|is required|ImportError|pip install", ln)
    ]
    return "\n".join(lines[-5:])


def test_the_demo_extra_is_lean_and_carries_what_the_readme_needs():
    names = closure(demo_requirements())
    assert not names & NOT_IN_THE_DEMO, sorted(names & NOT_IN_THE_DEMO)
    # embed -> .parquet; the Lee corpus of the first block ships with gensim
    assert {"pyarrow", "gensim", "sentence-transformers", "faiss-cpu"} <= names


def test_the_demo_site_hides_everything_else(tmp_path):
    """The folder is what the process sees: a module of the dev environment only is missing
    for ``import`` and for ``find_spec`` alike, and the demo's own are there."""
    env = demo_env(tmp_path)
    code = (
        "import importlib.util as u, importlib.metadata as m\n"
        "assert u.find_spec('pytest') is None and u.find_spec('ray') is None\n"
        "try:\n    import spacy\nexcept ImportError:\n    pass\n"
        "else:\n    raise SystemExit('spacy is importable')\n"
        "import pyarrow, faiss, privembed\n"
        "assert 'site-packages' not in privembed.__file__\n"
        "names = {d.metadata['Name'].lower() for d in m.distributions()}\n"
        "assert 'pytest' not in names and 'pyarrow' in names, sorted(names)\n"
    )
    r = _run([str(tmp_path / "bin" / "python"), "-c", code], env, tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_every_command_of_the_readme_command_line_section_runs_in_the_demo_environment(
    tmp_path,
):
    """Issue 40.1: after ``make demo``, ``privembed embed notes.jsonl -o emb.parquet`` failed
    with "pyarrow is required for Parquet files"."""
    found = command_line_blocks()
    assert any("privembed embed" in code for _, _, code in found), found
    env = demo_env(tmp_path / "env")
    work = tmp_path / "work"
    work.mkdir()
    for line, language, code in found:
        cmd = (
            ["bash", "-euo", "pipefail", "-c", code]
            if language == "bash"
            else [str(tmp_path / "env" / "bin" / "python"), "-c", code]
        )
        r = _run(cmd, env, work)
        assert r.returncode == 0, (
            f"README.md:{line} ({language}) fails with only privembed[demo] installed "
            f"(exit {r.returncode}); add what it needs to the demo extra in pyproject.toml\n"
            f"{_refused(r.stderr)}\n--- block ---\n{code}\n--- stderr ---\n{r.stderr[-3000:]}"
        )


@pytest.mark.slow
def test_privembed_demo_runs_in_the_demo_environment(tmp_path):
    env = demo_env(tmp_path / "env")
    r = _run([str(tmp_path / "env" / "bin" / "privembed"), "demo"], env, tmp_path)
    assert r.returncode == 0, f"{_refused(r.stderr)}\n{r.stderr[-3000:]}"
