"""Suite-wide settings: no test writes into the source tree.

Hypothesis keeps its example database in a temporary folder (not ``.hypothesis/`` in the
checkout), and a session fixture fails the run if any test created, changed or removed a file
anywhere in the checkout (``artifacts/``, ``.hypothesis/``, a report next to its input, an
edited fixture ...), tool caches and bytecode aside.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    # removed when the run ends: every pytest process (the claims check starts hundreds) would
    # otherwise leave a folder behind in the temporary directory
    _hypothesis_dir = tempfile.mkdtemp(prefix="privembed-hypothesis-")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _hypothesis_dir
    atexit.register(shutil.rmtree, _hypothesis_dir, ignore_errors=True)

# off a terminal, long commands write a progress line every 10 s (issue 40.3): whether a line
# appears depends on the machine's speed, so the suite writes none unless a test asks for them
# (tests/test_progress_lines.py injects a clock)
os.environ["PRIVEMBED_PROGRESS_INTERVAL"] = "0"

REPO = Path(__file__).resolve().parents[1]
#: folders a checkout may gain or change while tests run (tool caches, environments, bytecode,
#: build output of an install; never test output)
_ALLOWED = {
    ".git", ".venv", ".venv-demo", ".venv-langchain", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", "__pycache__", "build", "dist",
}  # fmt: skip


def _tree(top: Path = REPO) -> dict[str, tuple[int, int]]:
    """Every file under ``top`` outside the allowed folders: path -> (size, mtime in ns)."""
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in _ALLOWED and not d.endswith(".egg-info")]
        for f in files:
            p = os.path.join(root, f)
            try:
                st = os.stat(p)
            except FileNotFoundError:  # removed between the listing and the stat
                continue
            out[os.path.relpath(p, top)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="session", autouse=True)
def _source_tree_untouched() -> Iterator[None]:
    before = _tree()
    yield
    after = _tree()
    new = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (new or gone or changed), (
        f"tests wrote into the source tree: new {new[:10]}, changed {changed[:10]}, "
        f"removed {gone[:10]}"
    )


#: a real PostgreSQL (pgserver) for the ledger's and the pgvector store's tests
pytest_plugins = ["tests._postgres"]
