"""The ``privembed`` command line: parse, call the API, print. No logic lives here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ._cli._groups import (
    InputFields,
    LedgerOptions,
    RandomnessOptions,
    Report,
    SubjectOptions,
)
from ._cli.common import (
    APP_SETTINGS,
    EmbedBackend,
    MechanismName,
    MechanismOptions,
    OneLineErrors,
    SubspaceNoise,
    console,
    err_console,
    fail,
    user_errors,
    with_option_groups,
)
from ._cli.options import (
    OptAllowReprotect,
    OptBatchRows,
    OptColumn,
    OptJson,
    OptJsonFull,
    OptJsonSummary,
    OptLedgerTimeout,
    OptModel,
    OptOverwriteFile,
    OptRunSeed,
    OptSeed,
    backend_flag,
    id_field_flag,
    mechanism_flag,
    n_flag,
    output_flag,
    text_field_flag,
)
from ._cli.stores import BasisOptions

app = typer.Typer(
    name="privembed",
    help="Protect text embeddings before they leave a trust boundary, and measure the cost.",
    cls=OneLineErrors,
    rich_markup_mode=None,
    **APP_SETTINGS,
)


#: the command modules, in the order of ``--help``: each ``privembed._cli.<name>`` has one
#: ``register(app)`` that attaches its commands or its command group (the commands written in
#: this file -- embed, protect, info, demo, keygen, version -- come first)
COMMAND_MODULES = (
    "evaluate", "serve", "advise", "audit", "text", "concept", "attack", "ledger", "stores",
    "cluster", "basis",
)  # fmt: skip


EmbedInput = Annotated[
    Path,
    typer.Argument(
        help="Texts: JSONL, CSV or Parquet with a text field (--text-field), or .txt (one text "
        "per line)."
    ),
]


@app.command()
@user_errors
def embed(
    input: EmbedInput,
    output: Annotated[Path, output_flag(help="Output (.parquet/.npz/.npy/.jsonl).")],
    text_field: Annotated[str, text_field_flag(help="Field or column holding the texts.")] = "text",
    id_field: Annotated[
        str | None,
        id_field_flag(help="Field or column holding the record ids (default: 'id' if present)."),
    ] = None,
    model: OptModel = None,
    batch_size: Annotated[int, typer.Option(help="Texts per model call.")] = 64,
    backend: Annotated[
        EmbedBackend | None,
        backend_flag(
            help="Model runtime (default: $PRIVEMBED_EMBED_BACKEND, else auto: ONNX Runtime "
            "when installed; onnx-int8 is faster and its vectors differ slightly)."
        ),
    ] = None,
    overwrite: OptOverwriteFile = False,
    as_json: OptJsonSummary = False,
) -> None:
    """Embed texts with a sentence-transformers model (offline by default).

    Every other field or column of the input (not the texts) is kept in Parquet and JSONL
    outputs, so that 'privembed index --metadata-field' can store it. They are not protected:
    'privembed protect' drops them unless one is named with --keep-field.
    """
    from . import __version__
    from ._cli.common import print_json, progress_done
    from .data.embedders import Embedder
    from .data.io import detect_format, read_text_table, write_embeddings

    out_format = detect_format(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"output exists: {output} (pass --overwrite to replace it).")
    table = read_text_table(
        input, text_field=text_field, id_field=id_field or "id", require_ids=id_field is not None
    )
    emb = Embedder(model, batch_size=batch_size, backend=backend)
    with progress_done("embedding", table.n, unit="texts") as on_progress:
        X = emb.encode(table.texts, on_progress=on_progress)
    meta = {
        **emb.metadata(),
        "privembed_version": __version__,
        "source": str(input.name),
        "protected": False,
    }
    columns = [] if table.columns is None else list(table.columns.column_names)
    kept = columns if out_format in ("parquet", "jsonl") else []
    write_embeddings(
        output,
        X,
        ids=table.ids,
        metadata=meta,
        extra=table.columns if kept else None,
        src=input,
        overwrite=overwrite,
    )
    if as_json:
        print_json(
            {
                "output": str(output),
                "rows": int(X.shape[0]),
                "dim": int(X.shape[1]),
                "embedding_model": meta["embedding_model"],
                "embedding_model_identity": meta.get("embedding_model_identity"),
                "embedding_backend": meta.get("embedding_backend"),
                "ids": table.ids is not None,
                "columns": kept,
            }
        )
        return
    err_console.print(
        f"wrote {X.shape[0]} x {X.shape[1]} embeddings to {output}"
        + (f" with columns {', '.join(kept)}" if kept else "")
        + f" ({meta.get('embedding_model')} on {meta.get('embedding_backend', 'its backend')})",
        highlight=False,
    )
    if kept:
        err_console.print(
            f"[yellow]note:[/yellow] {', '.join(kept)} are not protected: 'privembed protect' "
            "drops them unless named with --keep-field.",
            highlight=False,
        )
    if columns and not kept:
        err_console.print(
            f"[yellow]note:[/yellow] .{out_format} files hold no other columns: "
            f"{', '.join(columns)} not kept (write .parquet or .jsonl to keep them).",
            highlight=False,
        )


# ---- protect's own options (the shared ones: _cli/options.py; the mechanism's: _cli/common.py) --
ProtectInput = Annotated[
    Path,
    typer.Argument(
        help="Embeddings (.parquet/.npy/.npz/.jsonl) or texts (.jsonl/.csv/.parquet/.txt)."
    ),
]
ProtectMechanism = Annotated[
    MechanismName, mechanism_flag(help="The privacy mechanism (see the README).")
]
Noise = Annotated[SubspaceNoise | None, typer.Option(help="Noise law in the subspace (subspace).")]
Erase = Annotated[
    Path | None,
    typer.Option(
        help="Remove a concept before the noise: a concept profile learned with --eraser "
        "(or its .eraser.npz). LEACE; no guarantee of its own.",
    ),
]
TextBackend = Annotated[
    EmbedBackend | None,
    backend_flag(
        help="Model runtime for text input (default: $PRIVEMBED_EMBED_BACKEND, else auto)."
    ),
]


@app.command()
@user_errors
@with_option_groups
def protect(
    *,
    input: ProtectInput,
    output: Annotated[Path, output_flag(help="Output file (written atomically).")],
    mechanism: ProtectMechanism,
    params: MechanismOptions,
    basis: BasisOptions,
    noise: Noise = None,
    seed: OptSeed = None,
    fields: InputFields,
    erase: Erase = None,
    model: OptModel = None,
    backend: TextBackend = None,
    batch_rows: OptBatchRows = 4096,
    allow_reprotect: OptAllowReprotect = False,
    randomness: RandomnessOptions,
    ledger_options: LedgerOptions,
    subjects: SubjectOptions,
    ledger_timeout: OptLedgerTimeout = 60.0,
    overwrite: OptOverwriteFile = False,
    report: Report,
) -> None:
    """Protect embeddings with a privacy mechanism (texts are embedded first).

    Prints what the release charges each record and the setting's expected mean cosine, with a
    note when it is below a useful level or the guarantee is vacuous.
    """
    from ._cli.common import progress_callback
    from .mechanisms import build_mechanism
    from .release import open_ledger, protect_file

    ledger, key_file = ledger_options.ledger, randomness.key_file
    randomness.check(seed, ledger)
    basis.check(mechanism)
    eraser = _load_eraser(erase)
    with (
        # one ledger for the command: a DP-PCA basis is charged with the release it serves
        open_ledger(
            ledger, timeout=ledger_timeout, on_wait=_waiting_for_ledger(ledger_timeout)
        ) as led,
        randomness.policy(),
        progress_callback("protecting") as (set_total, advance),
    ):
        subspace = basis.fit(
            input, led, column=fields.column, id_column=fields.id_column, model=model
        )
        mech = build_mechanism(mechanism, basis=subspace, noise=noise, **params.kwargs())
        summary = protect_file(
            input, output, mech, key=key_file, rng=seed, generator=randomness.generator,
            ledger=led, **ledger_options.budgets(), **subjects.kwargs(),
            ledger_timeout=ledger_timeout, **fields.kwargs(), model=model,
            embedder=_text_embedder(input, model, backend, fields.text_field),
            batch_rows=batch_rows, allow_reprotect=allow_reprotect, overwrite=overwrite,
            eraser=eraser,
            on_start=set_total, on_batch=advance, on_wait=_waiting_for_ledger(ledger_timeout),
        )  # fmt: skip
    _report_protected(
        summary, mech, output, ledger, as_json=report.as_json, quiet=report.quiet,
        keyed=key_file is not None, model=model,
    )  # fmt: skip


def _load_eraser(erase: Path | None) -> Any:
    """The concept eraser ``--erase`` names (None without one)."""
    if erase is None:
        return None
    from .concepts.erasure import load_eraser

    return load_eraser(erase)


def _waiting_for_ledger(timeout: float) -> Any:
    """What protect says on stderr while another process holds the ledger's lock."""
    return lambda p: err_console.print(
        f"waiting for the ledger {p} (locked by another process; up to {timeout:g} s)...",
        highlight=False,
    )


def _report_protected(
    summary: Any,
    mech: Any,
    output: Path,
    ledger: str | None,
    *,
    as_json: bool,
    quiet: bool,
    keyed: bool = False,
    model: str | None = None,
) -> None:
    """protect's summary: JSON on stdout, or the release, its guarantee, what it charged and
    the setting's expected utility on stderr."""
    from .evaluation.evidence import with_evidence

    # computed by the release (privembed.release.setting), with what the evidence says
    note = with_evidence(summary.setting, mech, model=model, keyed=keyed, ledger=ledger is not None)
    if as_json:
        from ._cli.common import print_json

        out = {**summary.to_dict(), "output": str(output), "mechanism": mech.config}
        if note is not None:
            out["setting"] = note.to_dict()
        print_json(out)
        return
    if quiet:
        return
    err_console.print(
        f"protected {summary.rows} x {summary.dim_in} -> {summary.dim_out} embeddings -> {output}",
        highlight=False,
    )
    _print_guarantee(mech)
    err_console.print(_charge_line(summary, ledger), highlight=False)
    for line in summary.notes:
        err_console.print(f"[yellow]note:[/yellow] {line}", highlight=False)
    _print_note(note, guarantee=False)


def _charge_line(summary: Any, ledger: Any) -> str:
    """What the release cost, consistent with the ledger: a free re-release is not 'charged'."""
    if ledger is None:
        return f"{summary.charge}; no ledger records it"
    from .keys.ledger import redact_url

    ledger = redact_url(str(ledger))
    fresh, free = summary.fresh or 0, summary.free or 0
    if fresh == 0:
        return (
            f"ledger {ledger}: nothing charged -- all {free} record(s) were keyed re-releases "
            "of unchanged content (identical vectors)"
        )
    freed = f"; {free} free (keyed re-releases of unchanged content)" if free else ""
    return f"ledger {ledger}: {fresh} record(s) {summary.charge}{freed}"


def _text_embedder(
    input: Path, model: str | None, backend: str | None, text_field: str = "text"
) -> Any:
    """The embedder of a texts input when a runtime was asked for (else the default's)."""
    if backend is None:
        return None
    from .release import is_text_file

    if not is_text_file(input, text_field=text_field):
        raise ValueError("--backend applies to texts; this input holds embeddings.")
    from .data.embedders import Embedder

    return Embedder(model, backend=backend)


def _print_note(note: Any, *, guarantee: bool = True) -> None:
    if note is None:
        return
    err_console.print(note.summary(guarantee=guarantee), highlight=False)
    for line in note.notes:
        err_console.print(f"[yellow]note:[/yellow] {line}", highlight=False)
    for line in note.evidence:
        err_console.print(f"  {line}", highlight=False)


def _print_guarantee(mech: Any) -> None:
    err_console.print(f"mechanism: {mech!r}", highlight=False)
    err_console.print(f"guarantee: {mech.guarantee.describe()}", highlight=False)


@app.command()
@user_errors
def info(
    file: Annotated[Path, typer.Argument(help="An embeddings file.")],
    column: OptColumn = None,
    as_json: OptJsonFull = False,
) -> None:
    """What an embeddings file holds: rows, dimension, norms, model, and for a protected file
    the mechanism, its parameters, its guarantee and the key id."""
    from .data.io import describe_file

    report = describe_file(file, column=column)
    if as_json:
        from ._cli.common import print_json

        print_json(report)
        return
    _print_info(report)


def _print_info(report: dict[str, Any]) -> None:
    """The readable summary of ``privembed info`` (every field is in ``--json``)."""
    from ._cli.common import mechanism_text

    meta = dict(report["metadata"])

    def g(v: Any) -> str:
        return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    t = Table(title=report["file"], show_header=False, title_justify="left")
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row(
        "rows",
        f"{report['rows']} x {report['dim']} ({report['dtype']}), "
        + ("with record ids" if report["ids"] else "no record ids"),
    )
    t.add_row(
        "norms",
        f"min {g(report['norm_min'])}, mean {g(report['norm_mean'])}, max "
        f"{g(report['norm_max'])}; {report['nonfinite_rows']} non-finite, "
        f"{report['zero_rows']} zero row(s)",
    )
    model = meta.pop("embedding_model", None) or meta.pop("model", None)
    model_dim = meta.pop("dim", None)  # the model's dimension: shown when it differs
    if model is not None:
        details = [
            f"{model_dim}-d" if model_dim not in (None, report["dim"]) else None,
            meta.pop("embedding_backend", None),
        ]
        if meta.pop("normalized", None):
            details.append("normalised")
        quant = meta.pop("embedding_quantization", None)
        details.append(None if quant is None else f"quantisation {quant}")
        shown = ", ".join(str(d) for d in details if d)
        t.add_row("model", f"{model}" + (f" ({shown})" if shown else ""))
    protected = bool(meta.pop("protected", False))
    cfg = meta.pop("mechanism", None)
    guarantee_text = meta.pop("guarantee_text", None)
    meta.pop("guarantee", None)  # the same as guarantee_text, as data (--json)
    if protected:
        t.add_row("protected", "yes")
        if cfg is not None:
            t.add_row("mechanism", mechanism_text(cfg))
        if guarantee_text:
            t.add_row("guarantee", str(guarantee_text))
    else:
        t.add_row("protected", "no (clean embeddings: keep them inside the trust boundary)")
    randomness = meta.pop("randomness", None)
    if randomness is not None:
        t.add_row("randomness", str(randomness))
    key_id = meta.pop("key_id", None)
    if key_id is not None:
        gen = meta.pop("keyed_generator", None)
        t.add_row("key id", str(key_id) + (f" (keyed noise, {gen} generator)" if gen else ""))
    previous = meta.pop("previous_protection", None)
    if isinstance(previous, dict):
        t.add_row("protected before", mechanism_text(previous.get("mechanism")))
    source = meta.pop("source", None)
    version = meta.pop("privembed_version", None)
    if source is not None or version is not None:
        t.add_row("source", f"{source or '?'} (privembed {version or '?'})")
    for key, v in meta.items():
        t.add_row(key.replace("_", " "), _plain(v))
    console.print(t)


def _plain(v: Any) -> str:
    """A metadata value in words: numbers to 4 digits, long strings (digests) cut, a record as
    ``key=value, ...`` of its scalars."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={_plain(x)}" for k, x in v.items() if not isinstance(x, dict | list))
    if isinstance(v, list):
        return f"{len(v)} values (see --json)"
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text if len(text) <= 40 else text[:12] + "…"


@app.command()
@user_errors
def demo(
    n: Annotated[int, n_flag(help="Number of synthetic notes.")] = 300,
    seed: OptRunSeed = 0,
    model: OptModel = None,
    output: Annotated[Path | None, output_flag(help="Also write the summary as JSON.")] = None,
    overwrite: OptOverwriteFile = False,
    as_json: OptJsonSummary = False,
) -> None:
    """The main job on a bundled sample: synthetic clinical notes, embedded, protected, measured."""
    from .demo import run_demo

    if n < 10:
        fail(f"n must be >= 10, got n={n}.")
    if output is not None and output.exists() and not overwrite:
        raise FileExistsError(f"output exists: {output} (pass --overwrite to replace it).")
    res = run_demo(
        n=n,
        seed=seed,
        model=model,
        on_step=lambda m: err_console.print(f"[dim]- {m}[/dim]", highlight=False),
    )
    summary = {**res, "rows": [r.to_dict() for r in res["rows"]]}
    if output is not None:
        from .data.io import atomic_output

        with atomic_output(output, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(summary, indent=2))
    if as_json:
        from ._cli.common import print_json

        print_json(summary)
        return
    console.print(
        f"\n[bold]{res['n']} synthetic clinical notes[/bold], embedded with "
        f"{res['model']} ({res['dim']}-d). Example note:\n  [italic]{res['example']}[/italic]\n"
    )
    t = Table(title="What protection costs (utility) and buys (linkage attack success)")
    t.add_column("mechanism", overflow="fold")
    t.add_column("guarantee (from the actual parameters)", overflow="fold")
    t.add_column("mean cosine", justify="right")
    t.add_column("top-1 retrieval (= re-identification)", justify="right")
    for r in res["rows"]:
        t.add_row(r.label, r.guarantee, f"{r.mean_cosine:.3f}", f"{r.top1:.3f}")
    console.print(t)
    console.print(
        f"Mean cosine of a note to its most similar *other* note: "
        f"{res['nearest_other_note_cosine']:.3f}. Top-1 retrieval is the share of protected "
        "vectors whose own original is their nearest original: high utility for search, and "
        "exactly the success rate of an attacker who holds the originals."
    )
    for w in res["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    _print_path(res["path"])


def _print_path(path: dict[str, Any]) -> None:
    """The demo's second part: the deployment that keeps search useful, and what it defends."""
    console.print("\n[bold]The deployment that works (as 'privembed advise' recommends)[/bold]")
    for line in path.get("modes", []):
        console.print(f"- {line}", highlight=False, markup=False)
    console.print(path["advice"], highlight=False, markup=False)
    if path.get("recommended") is None:
        return
    if path.get("indexed"):
        console.print(path["indexed"], highlight=False, markup=False)
    for line in path.get("threat_lines", []):
        console.print(line, highlight=False, markup=False)


@app.command()
@user_errors
def keygen(
    output: Annotated[Path, output_flag(help="Key file to create (mode 0600).")],
    overwrite: OptOverwriteFile = False,
    as_json: OptJson = False,
) -> None:
    """Create a 256-bit secret key for keyed (repeat-safe) noise."""
    from .keys.keyed import keygen as _keygen

    kid = _keygen(output, overwrite=overwrite)
    if as_json:
        from ._cli.common import print_json

        print_json({"key_file": str(output), "key_id": kid})
        return
    err_console.print(f"wrote key {output} (key id {kid}); keep it secret and backed up")


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        console.print(f"privembed {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Protect text embeddings before they leave a trust boundary, and measure the cost."""


@app.command()
def version() -> None:
    """Print the privembed version (the same as 'privembed --version')."""
    _print_version(True)


def _register_commands() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"privembed._cli.{name}").register(app)


_register_commands()


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM as an exception: temporary outputs are removed on the way out."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal

    signal.signal(signal.SIGTERM, _terminated)
    try:
        app(prog_name="privembed")
    except KeyboardInterrupt:  # Ctrl-C while the command line is being parsed
        err_console.print("interrupted", highlight=False)
        raise SystemExit(130) from None


if __name__ == "__main__":  # pragma: no cover
    main()
