"""``privembed text``: sanitize and analyze on a tiny vocabulary, and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed._cli.text import app

from .conftest import make_vocab

runner = CliRunner()


@pytest.fixture()
def vocab_files(tmp_path):
    voc = make_vocab(n=300, d=6, seed=4)
    np.save(tmp_path / "v.npy", voc.vectors)
    (tmp_path / "w.txt").write_text("\n".join(voc.words) + "\n", encoding="utf-8")
    return ["--vectors", str(tmp_path / "v.npy"), "--word-list", str(tmp_path / "w.txt")]


def _assert_user_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output
    assert pattern in err, err


def test_sanitize_text_huge_epsilon_is_identity(vocab_files):
    text = "The cat sat, on the MAT!"
    r = runner.invoke(app, ["sanitize", text, "--epsilon", "1e6", "--seed", "1", *vocab_files])
    assert r.exit_code == 0, r.output
    assert r.stdout == text + "\n"
    assert "d_X privacy" in r.stderr


def test_sanitize_json(vocab_files):
    r = runner.invoke(
        app, ["sanitize", "the cat sat", "-e", "1e6", "--seed", "1", "--json", *vocab_files]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["texts"] == [{"text": "the cat sat", "sanitized": "the cat sat"}]
    assert out["mechanism"] == "laplace" and "d_X privacy" in out["guarantee"]


def test_analyze_refuses_a_folder_with_files_unless_overwrite(tmp_path, vocab_files):
    out = tmp_path / "an"
    out.mkdir()
    (out / "proportions.csv").write_text("old")
    args = ["analyze", "-e", "5", "--words", "5", "--mc", "0", "--no-plots", "-o", str(out)]
    _assert_user_error(runner.invoke(app, [*args, *vocab_files]), "pass --overwrite")
    assert (out / "proportions.csv").read_text() == "old"
    r = runner.invoke(app, [*args, "--overwrite", *vocab_files])
    assert r.exit_code == 0, r.output
    assert (out / "proportions.csv").read_text() != "old"


def test_sanitize_is_reproducible_with_a_seed(vocab_files):
    args = ["sanitize", "the cat sat on the mat", "-e", "1", "--seed", "7", *vocab_files]
    a, b = runner.invoke(app, args), runner.invoke(app, args)
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert a.stdout != "the cat sat on the mat\n"


@pytest.mark.parametrize(
    "extra",
    [
        ["--post", "rank", "--c", "0.5"],
        ["--mechanism", "exponential"],
        ["--oov", "replace"],
        ["--index", "hnsw"],
    ],
)
def test_sanitize_file_one_output_line_per_input_line(tmp_path, vocab_files, extra):
    f = tmp_path / "lines.txt"
    f.write_text("the cat sat\n\nA dog ran, Zzyzx!\n", encoding="utf-8")
    r = runner.invoke(
        app, ["sanitize", "--file", str(f), "-e", "2", "--seed", "0", *vocab_files, *extra]
    )
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == ""
    assert lines[2].endswith("!") and ", " in lines[2]


@pytest.mark.parametrize(
    "args,pattern",
    [
        (["sanitize", "x", "--epsilon", "-1"], "epsilon must be > 0, got epsilon=-1."),
        (["sanitize", "x"], "--epsilon is required"),
        (["sanitize", "-e", "1"], "give either a TEXT argument or --file"),
        (["sanitize", "x", "-e", "1", "--post", "rank"], "c must be given with post='rank'"),
        (["sanitize", "x", "-e", "1", "--post", "best"], "'best' is not one of 'nearest', 'rank'"),
        (["sanitize", "x", "-e", "1", "--mechanism", "exponential", "--c", "1"], "apply to"),
        (["analyze", "-e", "1,a", "-o", "out"], "epsilon must be a comma-separated list"),
        (["analyze", "-e", "0", "--words", "5", "-o", "out"], "epsilon must be > 0"),
        (["analyze", "--words", "0", "-o", "out"], "words must be >= 1"),
    ],
)
def test_bad_input_gives_one_line_errors(tmp_path, monkeypatch, vocab_files, args, pattern):
    from privembed.cli import app as main_app  # usage errors are one line at the top level

    monkeypatch.chdir(tmp_path)
    _assert_user_error(runner.invoke(main_app, ["text", *args, *vocab_files]), pattern)


def test_missing_files_give_one_line_errors(tmp_path, vocab_files):
    r = runner.invoke(
        app, ["sanitize", "--file", str(tmp_path / "nope.txt"), "-e", "1", *vocab_files]
    )
    _assert_user_error(r, "file not found")
    r = runner.invoke(
        app, ["sanitize", "x", "-e", "1", "--vectors", str(tmp_path / "v2.npy"), "--word-list", "w"]
    )
    _assert_user_error(r, "file not found")


def test_analyze_writes_tables_and_plots(tmp_path, vocab_files):
    out = tmp_path / "an"
    r = runner.invoke(
        app,
        [
            "analyze",
            "-e",
            "1,100",
            "--words",
            "40",
            "--neighbours",
            "10",
            "--mc",
            "2000",
            "--seed",
            "0",
            "-o",
            str(out),
            *vocab_files,
        ],
    )
    assert r.exit_code == 0, r.output
    for name in ("proportions", "neighbour_gaps", "dot_product"):
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists()
    assert (out / "proportions.png").exists() and (out / "dot_cdf.png").exists()
    rows = (out / "proportions.csv").read_text().splitlines()
    assert rows[0] == "mechanism,epsilon,c,original,neighbours,other,n_words"
    assert len(rows) == 1 + 2 * 3
    assert "Neighbour gaps" in r.stdout and "z_x1_x101" in r.stdout


def test_analyze_refuses_a_file_as_output_directory(tmp_path, vocab_files):
    f = tmp_path / "file"
    f.write_text("x")
    r = runner.invoke(app, ["analyze", "--words", "5", "-o", str(f), "--no-plots", *vocab_files])
    _assert_user_error(r, "output must be a directory")


def test_sanitize_with_a_cached_hnsw_index(tmp_path, vocab_files):
    cache = tmp_path / "idx.hnsw"
    args = ["sanitize", "the cat sat", "-e", "1e6", "--index", "hnsw", "--index-cache", str(cache)]
    for _ in range(2):  # build and save, then read
        r = runner.invoke(app, [*args, *vocab_files])
        assert r.exit_code == 0, r.output
        assert r.stdout == "the cat sat\n" and cache.is_file()
