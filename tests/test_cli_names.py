"""One name for each thing on the command line (issue 28.5).

A record's id, its text, a field copied through, a subject and store metadata have one option
name on every command (``--id-field``, ``--text-field``, ``--keep-field``, ``--subject-field``,
``--metadata-field``). The old spellings still parse, hidden from ``--help``, and give the same
result as the new ones.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from privembed._cli.common import RENAMED_OPTIONS, OptionGroup, with_option_groups
from privembed.cli import app
from privembed.data.io import read_embeddings

from .test_conventions import fake_model  # noqa: F401 - a fixture

runner = CliRunner()


def _commands() -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        else:
            out[" ".join(path)] = cmd

    walk(typer.main.get_command(app), [])
    return out


def _shown(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in getattr(p, "opts", ())}


def test_no_command_shows_an_old_spelling():
    offenders = {
        f"{name}: {old}" for name, cmd in _commands().items() for old in RENAMED_OPTIONS
        if old in _shown(cmd)
    }  # fmt: skip
    assert not offenders, sorted(offenders)


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("protect", {"--id-field", "--text-field", "--keep-field", "--subject-field"}),
        ("index", {"--id-field", "--text-field", "--metadata-field"}),
        ("embed", {"--id-field", "--text-field"}),
        ("protect-shards", {"--id-field", "--keep-field"}),
        ("protect-stream", {"--keep-field"}),
    ],
)
def test_each_command_names_a_thing_the_same_way(command, options):
    assert options <= _shown(_commands()[command])


def test_help_does_not_list_the_old_spellings():
    r = runner.invoke(app, ["protect", "--help"], terminal_width=200)
    assert r.exit_code == 0
    assert "--id-field" in r.output and "--text-field" in r.output
    assert "--id-column" not in r.output and "--keep-column" not in r.output


def _vectors(tmp_path: Path) -> Path:
    src = tmp_path / "e.parquet"
    X = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    table = {"rid": [f"r{i}" for i in range(6)], "embedding": X.tolist(), "lang": ["en"] * 6}
    pq.write_table(pa.Table.from_pydict(table), src)
    return src


@pytest.mark.parametrize(
    ("new", "old"), [("--id-field", "--id-column"), ("--keep-field", "--keep-column")]
)
def test_the_old_spelling_gives_the_same_release(tmp_path, new, old):
    src = _vectors(tmp_path)
    outs = []
    for i, name in enumerate((new, old)):
        out = tmp_path / f"p{i}.parquet"
        value = "rid" if "id" in name else "lang"
        extra = ["--id-field", "rid"] if "keep" in name else []
        r = runner.invoke(
            app,
            ["protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "10",
             "--seed", "1", name, value, *extra],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        outs.append(read_embeddings(out))
    assert np.array_equal(outs[0].X, outs[1].X)
    assert list(outs[0].ids) == list(outs[1].ids) == [f"r{i}" for i in range(6)]


def test_protect_reads_texts_from_a_named_field(tmp_path, fake_model):  # noqa: F811
    src = tmp_path / "notes.jsonl"
    rows = [{"key": f"k{i}", "body": f"note number {i}"} for i in range(4)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "p.parquet"
    r = runner.invoke(
        app,
        ["protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "10", "--seed", "1",
         "--text-field", "body", "--id-field", "key"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    got = read_embeddings(out)
    assert list(got.ids) == [f"k{i}" for i in range(4)] and got.X.shape == (4, 8)


def test_the_old_subject_spelling_still_reaches_the_check(tmp_path):
    src = _vectors(tmp_path)
    for name in ("--subject-field", "--subject-column"):
        r = runner.invoke(
            app,
            ["protect", str(src), "-o", str(tmp_path / "p.parquet"), "-m", "laplace",
             "--epsilon", "10", "--seed", "1", "--id-field", "rid", name, "lang"],
        )  # fmt: skip
        said = " ".join(r.stderr.split())
        assert r.exit_code == 2 and "--subject-field charges subjects" in said, said


@pytest.mark.parametrize("command", ["protect", "index"])
def test_an_unsupported_input_lists_the_text_formats_too(tmp_path, command):
    src = tmp_path / "notes.xyz"
    src.write_text('{"id": 1, "text": "hi"}\n', encoding="utf-8")
    args = [command, str(src), "-m", "laplace", "--epsilon", "10", "--seed", "1"]
    if command == "protect":
        args += ["-o", str(tmp_path / "p.parquet")]
    else:
        args += ["--store", "faiss", "--path", str(tmp_path / "db")]
    r = runner.invoke(app, args)
    said = " ".join(r.stderr.split())
    assert r.exit_code == 2, said
    assert ".csv" in said and ".txt" in said and ".npz" in said, said
    assert not (tmp_path / "p.parquet").exists() and not (tmp_path / "db").exists()


# ---- a mechanism declared once (issue 25.2/25.4) ---------------------------------------------


def _option(cmd: Any, name: str) -> tuple[Any, ...]:
    (p,) = [p for p in cmd.params if p.name == name]
    desc = p.type_descriptor
    return (tuple(p.opts), tuple(p.secondary_opts), p.help, p.default, desc.annotation)


def test_protect_and_audit_share_the_mechanism_options():
    from privembed._cli.common import MECHANISM_OPTIONS

    cmds = _commands()
    protect, audit = cmds["protect"], cmds["audit"]
    for name in MECHANISM_OPTIONS:
        assert _option(protect, name) == _option(audit, name), name
    for cmd in (protect, audit):
        names = [p.name for p in cmd.params if p.name in MECHANISM_OPTIONS]
        assert names == list(MECHANISM_OPTIONS)


#: flags that several commands mean the same thing by, each one ``Opt*`` alias of
#: ``_cli/options.py``: the same spelling, help, default and type on every command listed
_RELEASES = ["protect", "index", "protect-stream", "protect-shards"]
SAME_OPTION = {
    "--key-file": [*_RELEASES, "search"],
    "--ledger": _RELEASES,
    "--budget-epsilon": _RELEASES,
    "--budget-delta": _RELEASES,
    "--basis": ["protect", "index"],
    "--basis-epsilon": ["protect", "index"],
    "--basis-delta": ["protect", "index"],
    "--seed": ["protect", "index", "protect-stream"],
    "--column": ["protect", "index"],
    "--id-field": ["protect", "index"],
    "--text-field": ["protect", "index"],
    "--batch-rows": ["protect", "index"],
    "--allow-reprotect": ["protect", "index"],
    "--quiet": ["protect", "index"],
    "--json": ["protect", "index", "embed"],
    "--overwrite": ["protect", "embed"],
    # issue 41: one declaration per meaning (options.OptJson, OptRunSeed, OptModel, ...)
    "--model": ["embed", "protect", "demo", "advise", "evaluate"],
}

#: the same flag declared once per meaning: every command listed shares one declaration (its
#: spelling, help and type; the default is each command's own)
SAME_OPTION_BY_MEANING = {
    ("--epochs", "training"): ["attack inversion", "concept learn"],
    ("--lr", "training"): ["attack inversion", "concept learn"],
    ("--batch-size", "training"): ["attack token", "concept learn"],
    ("--copies", "adaptive attacker"): ["attack token", "attack attribute"],
    ("--json", "result"): ["keygen", "advise", "audit", "concept show", "ledger spent",
                           "text sanitize"],
    ("--json", "full"): ["info", "ledger show"],
    ("--json", "summary"): ["demo", "basis", "concept learn", "protect"],
    ("--overwrite", "file"): ["demo", "keygen", "concept learn", "concept combine", "protect"],
    ("--overwrite", "folder"): ["protect-shards", "text analyze"],
    ("--seed", "run"): ["demo", "advise", "evaluate"],
    ("--seed", "experiment"): ["audit", "text sanitize", "text analyze", "protect"],
}  # fmt: skip


@pytest.mark.parametrize(("flag", "commands"), sorted(SAME_OPTION.items()))
def test_commands_that_mean_the_same_by_a_flag_declare_it_once(flag, commands):
    cmds = _commands()
    declared = {}
    for name in commands:
        (p,) = [p for p in cmds[name].params if flag in getattr(p, "opts", ())]
        declared[name] = _option(cmds[name], p.name)
    assert len(set(declared.values())) == 1, declared


@pytest.mark.parametrize(("meaning", "commands"), sorted(SAME_OPTION_BY_MEANING.items()))
def test_a_flag_is_declared_once_per_meaning(meaning, commands):
    flag, _ = meaning
    cmds = _commands()
    declared = {}
    for name in commands:
        (p,) = [p for p in cmds[name].params if flag in getattr(p, "opts", ())]
        opts, secondary, help_, _default, annotation = _option(cmds[name], p.name)
        declared[name] = (opts, secondary, help_, annotation)
    assert len(set(declared.values())) == 1, declared


def test_the_ledger_options_are_declared_once():
    """protect's ledger flags come from ``_cli/options.py``; a budget flag says what it may do
    (set a first budget, confirm or lower one -- never raise it) on every command."""
    from privembed._cli.options import SHARED

    ledger_flags = {
        "--ledger", "--budget-epsilon", "--budget-delta", "--subject-field",
        "--subject-budget-epsilon", "--subject-budget-delta", "--ledger-timeout",
    }  # fmt: skip
    assert ledger_flags <= set(SHARED)
    assert ledger_flags <= _shown(_commands()["protect"])
    for name in _RELEASES:
        for flag in ("--budget-epsilon", "--budget-delta"):
            assert "confirm/lower" in str(_option_help(_commands()[name], flag)), (name, flag)


def test_the_mechanism_choice_is_the_registry():
    from typing import get_args

    from privembed._cli.common import IndexMechanismName, MechanismName
    from privembed.mechanisms import MECHANISMS

    assert get_args(MechanismName) == tuple(MECHANISMS)
    assert get_args(IndexMechanismName) == (*MECHANISMS, "none")
    for name in ("protect", "audit", "index"):
        (p,) = [p for p in _commands()[name].params if p.name == "mechanism"]
        assert set(MECHANISMS) <= set(p.type_descriptor.choices), name


# ---- shared flags: declared once in _cli/options.py (issue 25.4) ---------------------------


def test_no_command_module_spells_a_shared_flag_itself():
    import re

    import privembed.cli
    from privembed._cli import options

    src = Path(privembed.cli.__file__).parent
    offenders = []
    for f in [src / "cli.py", *sorted((src / "_cli").glob("*.py"))]:
        if f.name == "options.py":
            continue
        text = f.read_text(encoding="utf-8")
        for flag in options.SHARED:
            spelled = r'typer\.Option\(\s*(?:"-[a-z]",\s*)?"' + re.escape(flag) + r'"'
            for _ in re.finditer(spelled, text):
                offenders.append(f"{f.name}: {flag}")
    # spelled on purpose where the same flag means another thing (options.OTHER_MEANING)
    assert sorted(offenders) == ["stores.py: --k", "text.py: --mechanisms"], offenders
    assert {("search", "--k"), ("text analyze", "--mechanisms")} <= set(options.OTHER_MEANING)


def test_every_command_spells_and_types_a_shared_flag_alike():
    from privembed._cli.options import OTHER_MEANING, SHARED

    booleans = {"--json", "--overwrite", "--quiet", "--allow-reprotect", "--ids-from-content"}
    seen: dict[str, int] = {}
    for name, cmd in _commands().items():
        opts_of: dict[str, str] = {}
        for p in cmd.params:
            for o in [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]:
                # one spelling, one parameter: a shared short alias cannot collide
                assert o not in opts_of, f"{name}: {o} is both {opts_of[o]} and {p.name}"
                opts_of[o] = p.name
            for flag, (short, _factory) in SHARED.items():
                if flag not in getattr(p, "opts", ()) or (name, flag) in OTHER_MEANING:
                    continue
                seen[flag] = seen.get(flag, 0) + 1
                want = {flag} if short is None else {flag, short}
                assert set(p.opts) == want, f"{name}: {flag} spelled {p.opts}"
                if flag in booleans:
                    assert p.is_flag and p.default is False, f"{name}: {flag} is not an off flag"
                if flag == "--texts":
                    assert p.hidden, f"{name}: the deprecated --texts shows in --help"
    # the contract is exercised: every shared flag is used by some command
    assert set(seen) == set(SHARED), set(SHARED) - set(seen)
    assert seen["--json"] >= 10


def test_a_shared_flag_keeps_each_commands_own_help():
    cmds = _commands()
    helps = {n: _option_help(c, "--json") for n, c in cmds.items() if _option_help(c, "--json")}
    assert len(set(helps.values())) > 1  # worded per command, spelled once
    assert "JSON" in helps["protect"]


def _option_help(cmd: Any, flag: str) -> str | None:
    for p in cmd.params:
        if flag in getattr(p, "opts", ()):
            return str(p.help)
    return None


def test_every_command_module_registers_one_way():
    """One way to attach commands: cli.COMMAND_MODULES, each module's register(app)."""
    import importlib
    import pkgutil

    import privembed._cli as pkg
    import privembed.cli as cli

    # common, options and the private modules (_attack_shape) serve commands; they add none
    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")}
    modules -= {"common", "options"}
    assert set(cli.COMMAND_MODULES) == modules
    for name in modules:
        assert callable(importlib.import_module(f"privembed._cli.{name}").register)
    text = Path(cli.__file__).read_text(encoding="utf-8")
    for other_way in ("__import__(", "add_typer(", "import register"):
        assert other_way not in text, other_way
    # every registered command is reachable from the top-level app
    names = set(_commands())
    for expected in ("serve", "advise", "evaluate", "index", "ledger show", "attack linkage"):
        assert expected in names, expected


# ---- options declared in place, repeated (issue 41.1) ----------------------------------------


def repeated_option_declarations() -> dict[str, list[str]]:
    """Parameter names that commands declare in place -- ``name: Annotated[T, <option>(...)]``
    in a command's signature, not through a shared ``Opt*`` alias or an option group -- at more
    than one place: name -> ``file:line`` of each. Issue 41 counted 27 (at 9b38fdb).

    Run ``python -m tests.test_cli_names`` for the list."""
    import ast
    from collections import defaultdict

    import privembed.cli

    src = Path(privembed.cli.__file__).parent
    places: dict[str, list[str]] = defaultdict(list)
    for f in [src / "cli.py", *sorted((src / "_cli").glob("*.py"))]:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            ann = getattr(node, "annotation", None) if isinstance(node, ast.arg) else None
            if (
                isinstance(ann, ast.Subscript)
                and ast.unparse(ann.value) == "Annotated"
                and isinstance(ann.slice, ast.Tuple)
                and isinstance(ann.slice.elts[1], ast.Call)
            ):
                places[node.arg].append(f"{f.name}:{node.lineno}")
    return {k: v for k, v in places.items() if len(v) > 1}


def test_the_counter_sees_an_option_declared_in_place(tmp_path, monkeypatch):
    """The counter is not blind: a second in-place ``--seed`` in a copy of the CLI is counted."""
    import shutil

    import privembed.cli

    src = Path(privembed.cli.__file__).parent
    fake = tmp_path / "privembed"
    shutil.copytree(src / "_cli", fake / "_cli")
    shutil.copy(src / "cli.py", fake / "cli.py")
    before = repeated_option_declarations()
    extra = (
        'def twice(\n    batch_rows: Annotated[int, typer.Option(help="x")] = 1,\n) -> None: ...\n'
    )
    (fake / "_cli" / "zz.py").write_text(extra + extra.replace("twice", "thrice"))
    monkeypatch.setattr(privembed.cli, "__file__", str(fake / "cli.py"))
    after = repeated_option_declarations()
    assert len(after["batch_rows"]) == len(before.get("batch_rows", [])) + 2


def test_options_declared_in_place_repeat_less_than_they_did():
    """27 names were declared in place at several places (issue 41); sharing the options that
    mean the same (option groups, ``Opt*`` aliases) left 22, and one ``Opt*`` alias per meaning
    of --json, --overwrite, --seed, --model and of a training's --epochs/--lr/--batch-size and
    --copies left 14. The rest are --output (a different kind of file or folder on nearly every
    command), INPUT arguments that name different things, and names that mean different things
    on different commands (--epsilon of a budget or of a simulation, --delta of the Gaussian
    alone or of gaussian/projection, --top, --subject, ...)."""
    repeated = repeated_option_declarations()
    assert len(repeated) <= 14, sorted(repeated)
    for shared in ("as_json", "overwrite", "seed", "model", "epochs", "lr", "batch_size"):
        assert shared not in repeated, (shared, repeated[shared])


def test_attack_commands_share_their_common_options():
    """Every attack command takes the run options (seed, key, model, -o, --json) and, where it
    protects its inputs itself, the mechanism options from one declaration each."""
    from privembed._cli._attack_shape import MechanismSpec, Run

    cmds = {n: c for n, c in _commands().items() if n.startswith("attack ")}
    assert len(cmds) == 6
    run = [f.name for f in dataclasses.fields(Run) if f.init]
    spec = [f.name for f in dataclasses.fields(MechanismSpec) if f.init]
    protects = [n for n, c in cmds.items() if "--mechanism" in _shown(c)]
    assert len(protects) == 5  # all but fingerprint, which simulates its own defender
    for names, which in ((run, list(cmds)), (spec, protects)):
        for name in names:
            declared = {_option(cmds[c], name) for c in which}
            assert len(declared) == 1, (name, declared)


# ---- option groups (common.OptionGroup) ------------------------------------------------------


@dataclasses.dataclass
class _Pair(OptionGroup):
    a: Annotated[int, typer.Option(help="First.")] = 1
    b: Annotated[str, typer.Option(help="Second.")] = "x"
    total: str = dataclasses.field(init=False, default="")

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError(f"--a must be >= 0, got {self.a}.")
        self.total = f"{self.b}{self.a}"


_SEEN: list[tuple[int, _Pair, bool]] = []


def _grouped(
    first: Annotated[int, typer.Option(help="Before.")] = 0,
    *,
    pair: _Pair,
    last: Annotated[bool, typer.Option(help="After.")] = False,
) -> None:
    _SEEN.append((first, pair, last))


def test_an_option_group_shows_in_place_and_arrives_whole():
    command = with_option_groups(_grouped)
    assert list(inspect.signature(command).parameters) == ["first", "a", "b", "last"]
    app_ = typer.Typer()
    app_.command("go")(command)
    app_.command("other")(lambda: None)  # two commands: each is called by its name
    _SEEN.clear()
    r = runner.invoke(app_, ["go", "--a", "3", "--b", "y", "--last"])
    assert r.exit_code == 0, r.output
    ((first, pair, last),) = _SEEN
    assert isinstance(pair, _Pair)
    assert (first, pair.a, pair.b, pair.total, last) == (0, 3, "y", "y3", True)
    assert "--a" in runner.invoke(app_, ["go", "--help"]).output
    r = runner.invoke(app_, ["go", "--a", "-1"])
    assert r.exit_code != 0 and "--a must be >= 0" in str(r.exception)


if __name__ == "__main__":
    found = repeated_option_declarations()
    print(f"{len(found)} option names declared in place at several places")
    for name, where in sorted(found.items(), key=lambda kv: -len(kv[1])):
        print(f"  {name} x{len(where)}: {', '.join(where)}")
