"""The command line follows the ecosystem's conventions (issue 20).

* ``--help`` of every command, rendered at 80 columns, shows every value of every choice and
  no ``<bool>`` after a flag; closed sets (mechanisms, calibrations, ...) are choices whose
  values are the library's own lists.
* ``privembed --version``; ``--json`` is a plain flag on every command that prints a result;
  one positional input per command; an option name has one type everywhere.
* outputs are never replaced without ``--overwrite``.
* ``embed`` reads JSONL, CSV and Parquet texts, keeps every other column, and names the text
  formats for an unsupported input; ``info`` and ``ledger show`` read as summaries.
* progress bars count rows or texts and show a rate and the time left.

A fake embedder stands in for the model here (``tests/test_journey.py`` runs the real one).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, ClassVar, get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from privembed import __version__
from privembed._cli import common
from privembed.cli import app
from privembed.data.io import read_embeddings, write_embeddings

runner = CliRunner()


def _commands() -> list[tuple[str, Any]]:
    """Every leaf command of the app as ("attack linkage", click command)."""
    out: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        else:
            out.append((" ".join(path), cmd))

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = _commands()
NAMES = [name for name, _ in COMMANDS]


def _choices(param: Any) -> list[str]:
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if desc is not None else None
    return [str(getattr(c, "value", c)) for c in choices or ()]


def _help(name: str) -> str:
    r = runner.invoke(app, [*name.split(), "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    return r.stdout


# ---- help at 80 columns ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_help_at_80_columns_shows_every_choice_and_no_bool_metavar(name):
    cmd = dict(COMMANDS)[name]
    text = _help(name)
    too_long = [ln for ln in text.splitlines() if len(ln) > 80]
    assert not too_long, too_long
    assert "<bool>" not in text and "…" not in text
    flat = " ".join(text.split())
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        for value in _choices(param):
            assert re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", flat), (
                name,
                param.name,
                value,
            )


#: options that name a closed set wherever they appear (a free string would hide the values)
CLOSED = {
    "--mechanism",
    "--calibration",
    "--kind",
    "--neighbouring",
    "--input-norm",
    "--generator",
    "--bit-generator",
    "--store",
    "--post",
    "--oov",
    "--index",
    "--noise",
    "--across",
    "--rule",
    "--format",
    "--backend",
}


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("evaluate", "advise")])
def test_closed_sets_are_choices(name):
    cmd = dict(COMMANDS)[name]
    free = [
        opt
        for p in cmd.params
        if p.param_type_name == "option" and not getattr(p, "hidden", False)
        for opt in p.opts
        if opt in CLOSED and not _choices(p)
    ]
    assert not free, (name, free)


@pytest.mark.parametrize("name", ["evaluate", "advise"])
def test_sweeps_list_every_value_of_their_comma_separated_sets(name):
    flat = " ".join(_help(name).split())
    for value in get_args(common.MechanismName):
        assert re.search(rf"(?<![\w-]){value}(?![\w-])", flat), value
    if name == "evaluate":
        assert "any of: analytic, classic" in flat


def test_choice_types_are_the_librarys_lists():
    from privembed.core.rng import _FACTORIES
    from privembed.integrations.stores import STORES
    from privembed.mechanisms import MECHANISMS
    from privembed.mechanisms.base import INPUT_NORMS
    from privembed.mechanisms.jl import KINDS

    assert set(get_args(common.MechanismName)) == set(MECHANISMS)
    assert get_args(common.InputNorm) == INPUT_NORMS
    assert get_args(common.ProjectionKind) == KINDS
    assert set(get_args(common.StoreKind)) == set(STORES)
    from privembed.data.embedders import BACKENDS

    assert get_args(common.EmbedBackend) == BACKENDS
    from privembed.mechanisms.subspace import NOISES

    assert get_args(common.SubspaceNoise) == NOISES
    assert set(_FACTORIES) <= set(get_args(common.BitGeneratorName))
    from privembed.mechanisms import GaussianMechanism, PrivateProjection

    for value in get_args(common.Calibration):
        GaussianMechanism(epsilon=1.0, delta=1e-5, calibration=value)
    for value in get_args(common.Neighbouring):
        PrivateProjection(k=4, epsilon=1.0, delta=1e-5, neighbouring=value)


def test_bad_choice_is_one_line_with_the_values():
    r = runner.invoke(app, ["protect", "x.npy", "-o", "y.npy", "-m", "laplas"])
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "'laplas' is not one of 'gaussian', 'empirical', 'laplace'" in err


# ---- version, --json, positional input, option names ---------------------------------------


def test_version_option_and_command_agree():
    for args in (["--version"], ["-V"], ["version"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        assert r.stdout.strip() == f"privembed {__version__}"


#: commands that print a result (stdout) must offer --json
PRINTS_RESULT = [
    "embed",
    "protect",
    "info",
    "keygen",
    "index",
    "search",
    "advise",
    "text sanitize",
    "concept learn",
    "concept show",
    "ledger show",
    "ledger spent",
    "demo",
    "attack token",
    "attack fingerprint",
    "attack averaging",
    "attack linkage",
    "attack inversion",
]


@pytest.mark.parametrize("name", PRINTS_RESULT)
def test_json_is_a_plain_flag(name):
    cmd = dict(COMMANDS)[name]
    (param,) = [p for p in cmd.params if "--json" in p.opts]
    assert param.is_flag and not param.secondary_opts
    line = next(ln for ln in _help(name).splitlines() if ln.strip().startswith("--json"))
    assert "<" not in line.split("--json", 1)[1].split("  ")[0]  # no value shown


def test_attack_commands_take_a_positional_input_and_no_visible_embeddings_option():
    for name, cmd in COMMANDS:
        visible = {o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts}
        if name.startswith("attack "):
            assert any(p.param_type_name == "argument" for p in cmd.params), name
            # there: INPUT's texts can come with their embeddings
            if name not in ("attack token", "attack inversion", "attack attribute"):
                assert "--embeddings" not in visible, name
            assert "--texts" not in visible and "--protected" not in visible, name


def _annotation(param: Any) -> Any:
    ann = param.type_descriptor.annotation
    args = [a for a in get_args(ann) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in get_args(ann) else ann


#: sweeps take comma-separated lists of the values other commands take one of
_SWEEPS = {"evaluate", "advise", "text analyze"}
#: names whose meaning (and so type) must be the same on every command
SHARED = ["--k", "--epsilon", "--delta", "--seed", "--key-file", "--ledger", "--json",
          "--overwrite", "--output", "--model", "--mask", "--smoothing"]  # fmt: skip


@pytest.mark.parametrize("opt", SHARED)
def test_an_option_name_has_one_type(opt):
    types: dict[str, list[str]] = {}
    for name, cmd in COMMANDS:
        if name in _SWEEPS:
            continue
        for p in cmd.params:
            if p.param_type_name == "option" and opt in p.opts:
                types.setdefault(repr(_annotation(p)), []).append(name)
    assert len(types) <= 1, (opt, types)


def test_linkage_takes_ks_and_k_is_an_integer():
    cmd = dict(COMMANDS)["attack linkage"]
    opts = {o for p in cmd.params for o in p.opts}
    assert "--ks" in opts and "--k" not in opts


# ---- embed ----------------------------------------------------------------------------------


class FakeEmbedder:
    """Deterministic 8-d vectors from the text; records progress calls."""

    calls: ClassVar[list[list[int]]] = []

    def __init__(self, model: str | None = None, **_: Any) -> None:
        self.model = model

    def encode(self, texts: list[str], *, on_progress: Any = None) -> np.ndarray:
        done: list[int] = []
        X = np.zeros((len(texts), 8), dtype=np.float32)
        for i, t in enumerate(texts):
            X[i, sum(map(ord, t)) % 8] = 1.0
            X[i, len(t) % 8] += 0.5
            if on_progress is not None and (i % 2 == 1 or i == len(texts) - 1):
                on_progress(i + 1)
                done.append(i + 1)
        FakeEmbedder.calls.append(done)
        return X / np.linalg.norm(X, axis=1, keepdims=True)

    def metadata(self) -> dict[str, Any]:
        return {"embedding_model": "fake-8", "dim": 8, "normalized": True}


@pytest.fixture()
def fake_model(monkeypatch):
    import privembed.data.embedders

    FakeEmbedder.calls = []
    monkeypatch.setattr(privembed.data.embedders, "Embedder", FakeEmbedder)


NOTES = [
    {"id": "n1", "text": "Patient reports a mild cough.", "lang": "en", "ward": 3},
    {"id": "n2", "text": "Le patient a de la fièvre.", "lang": "fr", "ward": 1},
    {"id": "n3", "text": "Follow-up in two weeks.", "lang": "en", "ward": 3},
]


def _notes(tmp_path: Path, fmt: str) -> Path:
    p = tmp_path / f"notes.{fmt}"
    if fmt == "jsonl":
        p.write_text("".join(json.dumps(n) + "\n" for n in NOTES), encoding="utf-8")
    elif fmt == "csv":
        lines = ["id,text,lang,ward"] + [
            f'{n["id"]},"{n["text"]}",{n["lang"]},{n["ward"]}' for n in NOTES
        ]
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(NOTES), p)
    return p


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_embed_reads_jsonl_csv_parquet_and_keeps_every_other_column(tmp_path, fake_model, fmt):
    src = _notes(tmp_path, fmt)
    out = tmp_path / "emb.parquet"
    r = runner.invoke(app, ["embed", str(src), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["rows"] == 3 and summary["columns"] == ["lang", "ward"]
    t = pq.read_table(out)
    assert t.column_names == ["id", "lang", "ward", "embedding"]  # not the texts
    assert t.column("id").to_pylist() == ["n1", "n2", "n3"]
    assert t.column("lang").to_pylist() == ["en", "fr", "en"]
    assert t.column("ward").to_pylist() == [3, 1, 3]
    assert read_embeddings(out).X.shape == (3, 8)
    assert FakeEmbedder.calls == [[2, 3]]  # progress by texts, not by chunks


def test_embed_jsonl_output_keeps_the_fields_and_other_names(tmp_path, fake_model):
    src = tmp_path / "n.csv"
    src.write_text("doc,body,lang\nd1,first note,en\nd2,second note,fr\n", encoding="utf-8")
    out = tmp_path / "emb.jsonl"
    args = ["embed", str(src), "-o", str(out), "--text-field", "body", "--id-field", "doc"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["id"], x["lang"], len(x["embedding"])) for x in rows] == [
        ("d1", "en", 8),
        ("d2", "fr", 8),
    ]
    r = runner.invoke(app, ["embed", str(src), "-o", str(tmp_path / "e.npz")])
    assert r.exit_code == 2 and "no 'text' column (columns: doc, body, lang)" in r.stderr
    r = runner.invoke(app, [*args[:-1], "nope", "--output", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "has no 'nope' field" in r.stderr


def test_embed_unsupported_input_lists_the_text_formats(tmp_path, fake_model):
    bad = tmp_path / "c.xyz"
    bad.write_text("hello\n")
    r = runner.invoke(app, ["embed", str(bad), "-o", str(tmp_path / "e.parquet")])
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert "(use .jsonl, .csv, .parquet, .txt)" in err and ".npz" not in err, err


@pytest.mark.parametrize(
    "args",
    [["advise"], ["attack", "linkage", "-m", "laplace", "--epsilon", "5"], ["evaluate", "-o", "r"]],
)
def test_unsupported_input_lists_what_the_command_accepts(tmp_path, args):
    bad = tmp_path / "c.xyz"
    bad.write_text("hello\n")
    r = runner.invoke(app, [*args[:2], str(bad), *args[2:]] if args[0] == "attack" else
                      [args[0], str(bad), *args[1:]])  # fmt: skip
    assert r.exit_code == 2
    err = r.stderr.strip()
    if args[0] == "evaluate":  # embeddings only
        assert "(use .npy, .npz, .parquet, .jsonl)" in err, err
    else:
        assert "embeddings: .npy, .npz, .parquet, .jsonl; texts: .jsonl, .csv, .parquet" in err


def test_embed_and_protect_refuse_an_existing_output_unless_overwrite(tmp_path, fake_model):
    src = _notes(tmp_path, "jsonl")
    out = tmp_path / "emb.npy"
    out.write_bytes(b"keep")
    r = runner.invoke(app, ["embed", str(src), "-o", str(out)])
    assert r.exit_code == 2 and "pass --overwrite" in r.stderr and out.read_bytes() == b"keep"
    assert FakeEmbedder.calls == []  # refused before embedding
    assert runner.invoke(app, ["embed", str(src), "-o", str(out), "--overwrite"]).exit_code == 0
    prot = tmp_path / "p.npy"
    args = ["protect", str(out), "-o", str(prot), "-m", "laplace", "--epsilon", "50", "--seed", "0"]
    assert runner.invoke(app, args).exit_code == 0
    before = prot.read_bytes()
    r = runner.invoke(app, [*args[:-1], "1"])
    assert r.exit_code == 2 and "pass --overwrite" in r.stderr and prot.read_bytes() == before
    assert runner.invoke(app, [*args[:-1], "1", "--overwrite"]).exit_code == 0
    assert prot.read_bytes() != before


def test_keygen_json(tmp_path):
    r = runner.invoke(app, ["keygen", "-o", str(tmp_path / "k.key"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["key_file"].endswith("k.key") and re.fullmatch(r"[0-9a-f]{16}", out["key_id"])


# ---- info and ledger show -------------------------------------------------------------------


def test_info_is_a_readable_summary_and_json_has_the_full_record(tmp_path):
    X = np.random.default_rng(0).standard_normal((20, 6)).astype(np.float32)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=list(range(20)), metadata={"embedding_model": "toy", "dim": 6})
    key = tmp_path / "k.key"
    assert runner.invoke(app, ["keygen", "-o", str(key)]).exit_code == 0
    out = tmp_path / "p.parquet"
    args = ["protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "50"]
    assert runner.invoke(app, [*args, "--key-file", str(key)]).exit_code == 0
    r = runner.invoke(app, ["info", str(out)], terminal_width=100)
    assert r.exit_code == 0, r.output
    text = r.stdout
    flat = " ".join(text.split())
    assert "{" not in text and '"' not in text  # no raw JSON
    assert len(re.findall(r"\bdim\b", text)) == 0  # the dimension is shown once, in 'rows'
    assert "20 x 6 (float32), with record ids" in flat
    assert "laplace(epsilon=50" in flat and "d_X privacy" in flat
    assert "key id" in flat and "model" in flat and "toy" in flat
    r = runner.invoke(app, ["info", str(out), "--json"])
    full = json.loads(r.stdout)
    assert full["metadata"]["mechanism"]["mechanism"] == "laplace" and full["ids"] is True
    assert full["metadata"]["key_id"] in flat


def test_ledger_show_names_each_configuration_by_mechanism(tmp_path):
    X = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=list(range(10)))
    led = tmp_path / "l.db"
    for i, eps in enumerate(("50", "20")):
        args = ["protect", str(src), "-o", str(tmp_path / f"p{i}.parquet"), "-m", "laplace"]
        args += ["--epsilon", eps, "--ledger", str(led)]
        assert runner.invoke(app, args).exit_code == 0
    r = runner.invoke(app, ["ledger", "show", str(led)], terminal_width=80)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "1. laplace(epsilon=50" in flat and "2. laplace(epsilon=20" in flat
    assert "50-d_X privacy" in flat and "releases: 10" in flat and "fresh (no key)" in flat
    assert all(len(ln) <= 80 for ln in r.stdout.splitlines())


# ---- progress -------------------------------------------------------------------------------


def test_progress_bar_shows_counts_rate_and_time_left():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    bar, task = common._bar("embedding", 300, "texts", out=console)
    with bar:
        bar.update(task, completed=120)
        bar.refresh()
    shown = buf.getvalue()
    assert "embedding" in shown and "120/300" in shown and "texts/s" in shown
    assert re.search(r"\d+:\d\d:\d\d|-:--:--", shown)  # time left


def test_progress_helpers_are_silent_off_a_terminal(capsys):
    with common.progress_done("embedding", 3, unit="texts") as on_progress:
        on_progress(3)
    with common.progress_callback("protecting") as (set_total, advance):
        set_total(3)
        advance(3)
    assert list(common.progress(range(3), total=3, description="x")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
