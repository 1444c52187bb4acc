"""Suite-wide settings: no test writes into the source tree.

Hypothesis keeps its example database in a temporary folder (not ``.hypothesis/`` in the
checkout), and a session fixture fails the run if any test left a new file or folder at the top
of the repository (``artifacts/``, ``.hypothesis/``, reports ...).
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

REPO = Path(__file__).resolve().parents[1]
#: what a checkout may gain while tests run (tool caches, never test output)
_ALLOWED = {".venv", ".venv-langchain", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


@pytest.fixture(scope="session", autouse=True)
def _source_tree_untouched() -> Iterator[None]:
    before = {p.name for p in REPO.iterdir()}
    yield
    new = {p.name for p in REPO.iterdir()} - before - _ALLOWED
    assert not new, f"tests wrote into the source tree: {sorted(new)}"


#: a real PostgreSQL (pgserver) for the ledger's and the pgvector store's tests
pytest_plugins = ["tests._postgres"]
