"""Run each claim's mutations against its tests, in a copy of the source tree.

For the selected claims:

1. the repository's files (``git ls-files``: tracked and untracked-but-not-ignored) are copied to
   a temporary folder; the checkout itself is never written;
2. the copy is checked to be what Python imports there (``privembed`` and the console script's
   module resolve inside it, through ``PYTHONPATH``), so no run can test the checkout instead;
3. **mutations**: each mutation's edits are made in the copy (each ``old`` text must occur
   exactly once, and the file must still compile), the claim's tests run with ``-x``, and at least
   one must *fail*; then the file is restored. A run with no failure (the mutation survived), a
   collection or import error (the mutation broke something else first) or a timeout is a
   failure of the check;
4. **baseline**: every test that caught a mutation runs once more in the copy, unmutated, and
   must pass -- a test that fails anyway catches nothing, and its mutations count as
   ``unverified``. (Only the catching tests are re-run: the claim's other tests judged no
   mutation, and the whole suite runs in CI beside this check.)

Tests run with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (third-party pytest plugins load in about
15 s on a busy machine; the suite's tests need none of them) and without writing bytecode for
mutated files, so a restored file never meets a stale ``.pyc``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .registry import REPO, Claim, Mutation, RegistryError

#: seconds one pytest run may take before it counts as a timeout
DEFAULT_TIMEOUT = 600.0
_SUMMARY = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$", re.MULTILINE)


@dataclass
class Outcome:
    """What happened to one mutation (or to the baseline, ``mutation=None``)."""

    mutation: Mutation | None
    status: (
        str  # "caught", "survived", "broken", "timeout", "unverified"; baseline: "passed", "failed"
    )
    seconds: float
    failed: list[str] = field(default_factory=list)
    returncode: int | None = None
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("caught", "passed")

    def to_dict(self) -> dict[str, object]:
        m = self.mutation
        return {
            "claim": None if m is None else m.claim,
            "mutation": None if m is None else m.name,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "failed": self.failed,
            "returncode": self.returncode,
        }


def source_files(root: Path) -> list[str]:
    """The files of the repository a copy needs: tracked and untracked-but-not-ignored (git),
    or every file outside virtual environments and caches when ``root`` is not a git checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        skip = {
            ".git",
            ".venv",
            ".venv-demo",
            ".venv-langchain",
            "__pycache__",
            ".mypy_cache",
            ".ruff_cache",
        }
        names = [
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(root).parts)
        ]
    return sorted(n for n in names if (root / n).is_file())


class Workspace:
    """A private copy of the repository in which tests run and mutations are made."""

    def __init__(self, source: Path, parent: Path, name: str) -> None:
        self.root = parent / name
        for rel in source_files(source):
            dst = self.root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dst)
        self._lock = threading.Lock()

    def env(self, *, bytecode: bool) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.root / "src")
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        env.pop("PRIVEMBED_FAULT_AT", None)
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def check_imports(self) -> None:
        """Fail unless ``privembed`` and ``_privembed_entry`` import from this copy."""
        code = (
            "import privembed, _privembed_entry; "
            "print(privembed.__file__); print(_privembed_entry.__file__)"
        )
        r = subprocess.run(
            [sys.executable, "-c", code],
            cwd=self.root,
            env=self.env(bytecode=True),
            capture_output=True,
            text=True,
            check=False,
        )
        where = r.stdout.split()
        if r.returncode != 0 or len(where) != 2:
            raise RegistryError(f"the copy does not import: {r.stderr.strip()[-500:]}")
        for w in where:
            if not Path(w).resolve().is_relative_to(self.root.resolve()):
                raise RegistryError(
                    f"in the copy, Python imports {w} instead of the copy's own source: "
                    "the mutations would not be tested"
                )

    def pytest(
        self, tests: Sequence[str], *, timeout: float, stop_first: bool, bytecode: bool
    ) -> tuple[int | None, list[str], str, float]:
        """Run ``tests``; return (exit status or None on timeout, failed ids, output, seconds)."""
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE"]
        if stop_first:
            cmd.append("-x")
        t0 = time.monotonic()
        try:
            r = subprocess.run(
                [*cmd, *tests],
                cwd=self.root,
                env=self.env(bytecode=bytecode),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or ""
            text = out.decode(errors="replace") if isinstance(out, bytes) else out
            return None, [], text[-3000:], time.monotonic() - t0
        text = r.stdout + r.stderr
        failed = [m.group(2) for m in _SUMMARY.finditer(r.stdout)]
        return r.returncode, failed, text[-3000:], time.monotonic() - t0

    @contextlib.contextmanager
    def mutated(self, mutation: Mutation) -> Iterator[None]:
        """The copy with ``mutation`` made; every file restored afterwards."""
        new = mutation.apply(self.root)  # checks: old found once, compiles
        saved = {f: (self.root / f).read_bytes() for f in new}
        try:
            for f, text in new.items():
                _drop_bytecode(self.root / f)
                (self.root / f).write_text(text, encoding="utf-8")
            yield
        finally:
            for f, data in saved.items():
                (self.root / f).write_bytes(data)
                _drop_bytecode(self.root / f)


def _drop_bytecode(path: Path) -> None:
    if path.suffix == ".py":
        with contextlib.suppress(FileNotFoundError):
            Path(importlib.util.cache_from_source(str(path))).unlink()


def _catchers(o: Outcome) -> list[str]:
    """The tests that caught ``o``'s mutation: the failed ids pytest's summary names within the
    mutation's own test files (a captured log line that starts with ERROR is no test), else --
    when none can be told -- every test the mutation ran."""
    assert o.mutation is not None
    files = {t.split("::")[0] for t in o.mutation.run}
    named = [t for t in o.failed if t.split("::")[0] in files]
    return named or list(o.mutation.run)


def run_baseline(workers: Sequence[Workspace], tests: Sequence[str], timeout: float) -> Outcome:
    """``tests`` unmutated, split by test file over ``workers`` side by side (a file's tests stay
    in one run: their module fixtures are built once); one outcome for them all."""
    by_file: dict[str, list[str]] = {}
    for t in tests:
        by_file.setdefault(t.split("::")[0], []).append(t)
    shares: list[list[str]] = [[] for _ in workers]
    for group in sorted(by_file.values(), key=len, reverse=True):  # largest first, to the least
        min(shares, key=len).extend(group)
    pairs = [(w, share) for w, share in zip(workers, shares, strict=True) if share]
    with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
        runs = list(
            pool.map(
                lambda p: p[0].pytest(p[1], timeout=timeout, stop_first=False, bytecode=True),
                pairs,
            )
        )
    codes = [rc for rc, _, _, _ in runs]
    rc = 0 if all(c == 0 for c in codes) else next((c for c in codes if c != 0), None)
    failed = [f for _, fs, _, _ in runs for f in fs]
    tail = "\n".join(t for _, _, t, _ in runs)
    secs = max((s for _, _, _, s in runs), default=0.0)
    return Outcome(None, "passed" if rc == 0 else "failed", secs, failed, rc, tail)


def run_mutation(ws: Workspace, m: Mutation, timeout: float, *, every: bool = False) -> Outcome:
    """Run ``m``'s tests with ``m`` made (stopping at the first failure unless ``every``)."""
    try:
        with ws.mutated(m):
            rc, failed, tail, secs = ws.pytest(
                m.run, timeout=timeout, stop_first=not every, bytecode=False
            )
    except RegistryError as exc:
        return Outcome(m, "broken", 0.0, [], None, str(exc))
    if rc is None:
        status = "timeout"
    elif rc == 0:
        status = "survived"
    elif rc == 1 and failed:
        status = "caught"
    else:  # collection/import errors, usage errors, no tests: the mutation broke something else
        status = "broken"
    return Outcome(m, status, secs, failed, rc, tail)


def select(claims: list[Claim], *, fast: bool, ids: Sequence[str] = ()) -> list[Claim]:
    """The claims to check: those named, else all; with ``fast`` (CI's subset) each keeps only
    its CI mutation (:attr:`Claim.ci_mutation`), so every claim is checked on every CI run."""
    if ids:
        known = {c.id: c for c in claims}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise RegistryError(f"no such claim(s): {unknown}")
        return [known[i] for i in ids]
    return (
        [dataclasses.replace(c, mutations=(c.ci_mutation,)) for c in claims]
        if fast
        else list(claims)
    )


def check_mutations(
    claims: list[Claim],
    *,
    jobs: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
    baseline: bool = True,
    source: Path = REPO,
    keep: bool = False,
    every: bool = False,
    report: Callable[[Outcome], None] = lambda o: None,
) -> list[Outcome]:
    """Every mutation of ``claims``, then the baseline of the tests that caught them; ``report``
    is called with each outcome (again, as ``unverified``, for a catch the baseline voids).
    ``every``: run all of a mutation's tests (not only up to the first failure) to see which
    of them catch it."""
    mutations = [m for c in claims for m in c.mutations]
    parent = Path(tempfile.mkdtemp(prefix="privembed-mutations-"))
    outcomes: list[Outcome] = []
    try:
        workers = [Workspace(source, parent, f"copy{i}") for i in range(max(1, jobs))]
        for w in workers:
            w.check_imports()
        for m in mutations:  # refuse a stale registry before spending any time
            m.apply(workers[0].root)
        todo: queue.SimpleQueue[Mutation] = queue.SimpleQueue()
        for m in mutations:
            todo.put(m)
        lock = threading.Lock()
        results: list[Outcome] = []

        def work(ws: Workspace) -> None:
            while True:
                try:
                    m = todo.get_nowait()
                except queue.Empty:
                    return
                o = run_mutation(ws, m, timeout, every=every)
                with lock:
                    results.append(o)
                    report(o)

        threads = [threading.Thread(target=work, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        caught = [o for o in results if o.status == "caught"]
        if baseline and caught:
            catchers = list(dict.fromkeys(t for o in caught for t in _catchers(o)))
            b = run_baseline(workers, catchers, timeout * 2)
            outcomes.append(b)
            report(b)
            for i, o in enumerate(results):
                # a catch counts only if the test that failed passes unmutated (when the baseline
                # failed without naming its tests, no catch can be trusted)
                if o.status == "caught" and (
                    set(_catchers(o)) & set(b.failed) or not (b.ok or b.failed)
                ):
                    results[i] = dataclasses.replace(o, status="unverified")
                    report(results[i])
        outcomes.extend(results)
    finally:
        if keep:
            print(f"copies kept in {parent}", file=sys.stderr)
        else:
            shutil.rmtree(parent, ignore_errors=True)
    return outcomes


def write_json(path: Path, outcomes: list[Outcome], seconds: float) -> None:
    body = {"seconds": round(seconds, 1), "outcomes": [o.to_dict() for o in outcomes]}
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
