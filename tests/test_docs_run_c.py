"""The blocks of attacks.md, concepts.md run as written (``tests/docs_blocks.py``: group "c")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_blocks import Block, Supplies, built_files, run_group, runs_as_written, supplies

__all__ = ["built_files", "supplies"]  # the fixtures, for pytest

BLOCKS = run_group("c")


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.where() for b in BLOCKS])
def test_block_runs_as_written(
    block: Block, supplies: Supplies, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    runs_as_written(block, supplies, request, tmp_path)
