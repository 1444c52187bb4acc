"""Documentation that runs as written (issues 28.8 and 40.4): every fenced block of README.md
and docs/*.md is classified, data blocks parse, every documented command line parses, and the
substitution table and the run groups cover what they must. The machinery, and what a block
may need, is in ``tests/docs_blocks.py``; the blocks that run are run by
``tests/test_docs_run_<group>.py``, a group of documents per file."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.docs_blocks import (
    ALL,
    DATA,
    DATA_BLOCKS,
    LINES,
    MAX_UNAVAILABLE,
    REPO,
    RUN,
    RUN_GROUPS,
    SUBSTITUTIONS,
    UNAVAILABLE,
    Block,
    blocks,
    run_group,
    unavailable,
)


@pytest.mark.parametrize("block", DATA_BLOCKS, ids=[b.where() for b in DATA_BLOCKS])
def test_data_block_parses(block: Block) -> None:
    parse = DATA[block.language]
    if parse is not None:
        parse(block.body)


# ---- the classification itself ----------------------------------------------------------------


def test_every_block_is_classified():
    """Every fenced block of every document is run, parsed or a labelled text; a need is one
    the test knows (``blocks`` raises otherwise), and few blocks need what no machine has."""
    assert len(ALL) == len(RUN) + len(DATA_BLOCKS)
    skipped = [f"{b.where()}: {unavailable(b)}" for b in RUN if unavailable(b)]
    assert len(skipped) <= MAX_UNAVAILABLE, skipped
    names = {b.document.name for b in RUN}
    assert {"README.md", "integrations.md", "retrieval.md", "security.md"} <= names, names


def test_each_substitution_matches_its_document_exactly_once():
    for s in SUBSTITUTIONS:
        doc = REPO / ("README.md" if s.document == "README.md" else f"docs/{s.document}")
        found = sum(b.body.count(s.old) for b in blocks(doc) if b.runs)
        assert found == 1, f"{s.document}: {s.old!r} matches {found} times (substitution: {s.why})"


def test_the_classifier_refuses_what_it_does_not_know(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("```python\nprint(1)\n```\n\n```\nprivembed embed a -o b\n```\n")
    with pytest.raises(ValueError, match="labelled"):
        blocks(doc)
    doc.write_text("```yaml\na: 1\n```\n")
    with pytest.raises(ValueError, match="labelled"):
        blocks(doc)
    doc.write_text("```bash\n# needs: a unicorn\nprivembed info x\n```\n")
    with pytest.raises(ValueError, match="names nothing"):
        blocks(doc)
    doc.write_text(
        "```console\n$ privembed a \\\n    --b 1\noutput line\n$ privembed c\n```\n\n"
        "```bash\n# needs: emb.parquet (privembed embed)\n# needs: a GPU (the device)\nx\n```\n"
    )
    console, gpu = blocks(doc)
    assert console.code([]) == "privembed a \\\n    --b 1\nprivembed c\n"
    assert gpu.needs == ("emb.parquet (privembed embed)", "a GPU (the device)")
    assert unavailable(gpu) == [f"needs a GPU (the device): {UNAVAILABLE['a GPU']}"]


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


def test_every_document_that_runs_is_in_one_run_group_with_its_own_test_file():
    """A block is run by exactly one ``test_docs_run_<group>.py``: the groups split the
    documents with a block that runs, none twice, none left out, and each group's file runs
    its group."""
    named = [d for docs in RUN_GROUPS.values() for d in docs]
    assert len(named) == len(set(named)), named
    assert {b.document.name for b in RUN} == set(named)
    assert sum(len(run_group(g)) for g in RUN_GROUPS) == len(RUN)
    for g in RUN_GROUPS:
        module = importlib.import_module(f"tests.test_docs_run_{g}")
        assert [b.where() for b in module.BLOCKS] == [b.where() for b in run_group(g)]
