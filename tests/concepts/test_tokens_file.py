"""Concept token files read through the JSONL reader of ``privembed.data.io``: the same one-line
errors as an embeddings or texts file, bare JSON strings accepted, and a bad line stops
``concept learn`` before anything is written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from privembed import DataError
from privembed.cli import app
from privembed.concepts import read_tokens
from privembed.data.io import iter_json_lines, read_embeddings, read_texts

from .test_profile import CountingEmbedder

DEEP = "[" * 100_000  # past any recursion limit: json.loads raises RecursionError on it


def test_jsonl_tokens_take_bare_strings_and_token_objects(tmp_path):
    p = tmp_path / "t.ndjson"
    p.write_text('"flu"\n\n{"token": " long covid "}\n{"token": "gout", "note": 1}\n')
    assert read_tokens(p) == ["flu", "long covid", "gout"]
    assert [n for n, _ in iter_json_lines(p)] == [1, 3, 4]  # blank lines skipped, lines counted


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (DEEP, "t.jsonl:2: JSON nested too deeply."),
        ("{oops", "t.jsonl:2: invalid JSON (Expecting property name enclosed in double quotes)."),
        ("3", "t.jsonl:2: expected a string or {'token': ...}."),
        ('{"token": ["flu"]}', "t.jsonl:2: expected a string or {'token': ...}."),
    ],
)
def test_a_bad_tokens_line_is_one_error_naming_the_line(tmp_path, line, message):
    p = tmp_path / "t.jsonl"
    p.write_text(f'"flu"\n{line}\n"gout"\n')
    with pytest.raises(DataError) as err:
        read_tokens(p)
    assert str(err.value) == f"{p.parent}/{message}"


def test_the_same_nested_line_reads_alike_in_tokens_texts_and_embeddings(tmp_path):
    """One line reader serves every JSONL file: the same bad line, the same message."""
    first = {"id": 1, "text": "flu", "token": "flu", "embedding": [1.0, 0.0]}
    messages = set()
    for reader in (read_tokens, read_texts, read_embeddings):
        p = tmp_path / f"{reader.__name__}.jsonl"
        p.write_text(json.dumps(first) + "\n" + DEEP + "\n")
        with pytest.raises(DataError, match=r":2: JSON nested too deeply\.$") as err:
            reader(p)
        messages.add(str(err.value).replace(p.name, "F"))
    assert len(messages) == 1, messages


def test_a_json_tokens_file_nested_too_deeply_is_a_data_error(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(DEEP)
    with pytest.raises(DataError, match=r"t\.json: JSON nested too deeply\.$"):
        read_tokens(p)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_concept_learn_stops_at_a_nested_tokens_file_and_writes_nothing(
    tmp_path, monkeypatch, suffix
):
    import privembed.data.embedders

    embedded: list[int] = []

    def toy(model=None):
        embedded.append(1)
        return CountingEmbedder(16)

    monkeypatch.setattr(privembed.data.embedders, "Embedder", toy)
    monkeypatch.setenv("PRIVEMBED_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"flu {i}"}) + "\n" for i in range(8)))
    tokens = tmp_path / f"tokens{suffix}"
    tokens.write_text('"flu"\n' + DEEP + "\n" if suffix == ".jsonl" else DEEP)
    before = {f: f.read_bytes() for f in tmp_path.iterdir()}
    out = tmp_path / "illness.profile"
    args = ["concept", "learn", str(corpus), "--concept", "illness", "--tokens", str(tokens)]
    r = CliRunner().invoke(app, [*args, "-o", str(out), "--epochs", "1", "--seed", "1"])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    where = f"{tokens}:2" if suffix == ".jsonl" else str(tokens)
    assert err == f"error: {where}: JSON nested too deeply.", err
    assert r.stdout == ""
    assert not out.exists()
    assert {f: f.read_bytes() for f in tmp_path.iterdir()} == before  # nothing new, inputs kept
    assert embedded == []  # stopped before any text was embedded
