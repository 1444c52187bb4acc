"""The blocks of evaluation.md, README.md run as written (``tests/docs_blocks.py``: group "b")."""

from __future__ import annotations

from tests.docs_blocks import block_test, built_files, supplies

__all__ = ["built_files", "supplies"]  # the fixtures, for pytest

BLOCKS, test_block_runs_as_written = block_test("b")
