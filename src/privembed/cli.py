"""The ``privembed`` command line: parse, call the API, print. No logic lives here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from ._cli.common import OneLineErrors, console, err_console, fail, progress, user_errors

app = typer.Typer(
    name="privembed",
    help="Protect text embeddings before they leave a trust boundary, and measure the cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)


def _register_subapps() -> None:
    """Attach optional command groups (each lives in privembed._cli.<name>)."""
    import importlib

    app.command(name="serve")(importlib.import_module("privembed._cli.serve").serve)
    for name in ("advise", "audit"):
        importlib.import_module(f"privembed._cli.{name}").register(app)
    for name, help_text in (
        ("text", "Word-level text sanitisation (d_X privacy) and its analysis."),
        ("concept", "Learn and inspect concept profiles (which dimensions carry a concept)."),
        ("attack", "Run privacy attacks that audit protected embeddings."),
        ("ledger", "Inspect the privacy ledger."),
    ):
        try:
            mod = importlib.import_module(f"privembed._cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"privembed._cli.{name}":
                continue
            raise
        app.add_typer(mod.app, name=name, help=help_text)


@app.command()
@user_errors
def embed(
    input: Annotated[Path, typer.Argument(help="Texts: JSONL with {'id', 'text'} or a .txt file.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Output (.parquet/.npz/.npy/.jsonl).")
    ],
    model: Annotated[
        str | None, typer.Option(help="Model name or folder (default: offline all-MiniLM-L6-v2).")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Texts per model call.")] = 64,
) -> None:
    """Embed texts with a sentence-transformers model (offline by default)."""
    from . import __version__
    from .embedders import Embedder
    from .io import detect_format, read_texts, write_embeddings

    detect_format(output)
    ids, texts = read_texts(input)
    emb = Embedder(model, batch_size=batch_size)
    chunks = []
    step = 1024
    for s in progress(
        range(0, len(texts), step), total=math.ceil(len(texts) / step), description="embedding"
    ):
        chunks.append(emb.encode(texts[s : s + step]))
    X = np.concatenate(chunks)
    meta = {
        **emb.metadata(),
        "privembed_version": __version__,
        "source": str(input.name),
        "protected": False,
    }
    write_embeddings(output, X, ids=ids, metadata=meta, src=input)
    err_console.print(f"wrote {X.shape[0]} x {X.shape[1]} embeddings to {output}")


@app.command()
@user_errors
def protect(
    input: Annotated[
        Path, typer.Argument(help="Embeddings (.parquet/.npy/.npz/.jsonl) or texts (JSONL/.txt).")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Output file (written atomically).")
    ],
    mechanism: Annotated[
        str,
        typer.Option(
            "--mechanism",
            "-m",
            help="gaussian|empirical|laplace|mahalanobis|purkayastha|projection",
        ),
    ],
    epsilon: Annotated[float | None, typer.Option(help="Privacy parameter epsilon.")] = None,
    delta: Annotated[float | None, typer.Option(help="delta (Gaussian, projection).")] = None,
    sigma: Annotated[float | None, typer.Option(help="Noise scale (empirical).")] = None,
    calibration: Annotated[str | None, typer.Option(help="analytic|classic (Gaussian).")] = None,
    covariance: Annotated[
        Path | None, typer.Option(help="Covariance .npy, (d,) or (d, d) (Mahalanobis).")
    ] = None,
    mask: Annotated[
        Path | None, typer.Option(help="Concept mask .npy or profile .npz (Mahalanobis).")
    ] = None,
    mask_delta: Annotated[
        float | None, typer.Option(help="delta added to the mask (Mahalanobis).")
    ] = None,
    smoothing: Annotated[
        float | None, typer.Option(help="Covariance smoothing lambda in [0, 1].")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="Projection dimension (projection).")] = None,
    kind: Annotated[str | None, typer.Option(help="gaussian|sparse|srht (projection).")] = None,
    projection_seed: Annotated[int | None, typer.Option(help="Public projection seed.")] = None,
    neighbouring: Annotated[str | None, typer.Option(help="record|attribute (projection).")] = None,
    input_norm: Annotated[str | None, typer.Option(help="normalize|clip|none.")] = None,
    renormalize: Annotated[
        bool | None, typer.Option("--renormalize/--no-renormalize", help="Unit-length outputs.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed for reproducible experiments (omit in production).")
    ] = None,
    column: Annotated[str | None, typer.Option(help="Embedding column (Parquet).")] = None,
    id_column: Annotated[str | None, typer.Option(help="Id column / field.")] = None,
    ids_from_content: Annotated[
        bool,
        typer.Option(help="Derive record ids from the content (texts or vectors without ids)."),
    ] = False,
    model: Annotated[str | None, typer.Option(help="Embedding model for text input.")] = None,
    batch_rows: Annotated[int, typer.Option(help="Rows per batch (bounds memory).")] = 4096,
    allow_reprotect: Annotated[
        bool, typer.Option(help="Protect a file that is already protected.")
    ] = False,
    key_file: Annotated[
        Path | None, typer.Option(help="Secret key (privembed keygen): keyed, repeat-safe noise.")
    ] = None,
    generator: Annotated[
        str | None,
        typer.Option(
            help="Keyed noise generator: philox|aes (default: aes under a CSPRNG policy)."
        ),
    ] = None,
    bit_generator: Annotated[
        str | None,
        typer.Option(help="Randomness policy: pcg64|philox|aes|chacha (aes/chacha: CSPRNG)."),
    ] = None,
    ledger: Annotated[
        Path | None, typer.Option(help="Privacy ledger (SQLite) that records and checks releases.")
    ] = None,
    budget_epsilon: Annotated[
        float | None,
        typer.Option(
            help="Set a first per-record epsilon budget, or confirm/lower the stored one."
        ),
    ] = None,
    budget_delta: Annotated[
        float | None,
        typer.Option(help="Set a first per-record delta budget, or confirm/lower the stored one."),
    ] = None,
    ledger_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for another process's ledger lock.")
    ] = 60.0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON summary (stdout) instead of text.")
    ] = False,
) -> None:
    """Protect embeddings with a privacy mechanism (texts are embedded first).

    Prints what the release charges each record and the setting's expected mean cosine, with a
    note when it is below a useful level or the guarantee is vacuous.
    """
    from ._cli.common import progress_callback
    from .mechanisms import build_mechanism
    from .release import protect_file
    from .rng import bit_generator_name, use_bit_generator

    mech = build_mechanism(
        mechanism,
        epsilon=epsilon,
        delta=delta,
        sigma=sigma,
        calibration=calibration,
        covariance=covariance,
        mask=mask,
        mask_delta=mask_delta,
        smoothing=smoothing,
        k=k,
        kind=kind,
        projection_seed=projection_seed,
        neighbouring=neighbouring,
        input_norm=input_norm,
        renormalize=renormalize,
    )
    if key_file is not None and seed is not None:
        raise ValueError("give --seed or --key-file, not both (keyed noise is deterministic).")
    with (
        use_bit_generator(bit_generator or bit_generator_name()),
        progress_callback("protecting") as (set_total, advance),
    ):
        summary = protect_file(
            input,
            output,
            mech,
            key=key_file,
            rng=seed,
            generator=generator,
            ledger=ledger,
            budget_epsilon=budget_epsilon,
            budget_delta=budget_delta,
            column=column,
            id_column=id_column,
            ids_from_content=ids_from_content,
            model=model,
            batch_rows=batch_rows,
            allow_reprotect=allow_reprotect,
            overwrite=overwrite,
            ledger_timeout=ledger_timeout,
            on_start=set_total,
            on_batch=advance,
            on_wait=lambda p: err_console.print(
                f"waiting for the ledger {p} (locked by another process; up to "
                f"{ledger_timeout:g} s)...",
                highlight=False,
            ),
        )
    note = _setting_note(mech, summary.dim_in)
    if as_json:
        from ._cli.common import print_json

        print_json(
            {
                **summary.to_dict(),
                "output": str(output),
                "mechanism": mech.config,
                "setting": None if note is None else note.to_dict(),
            }
        )
        return
    if quiet:
        return
    err_console.print(
        f"protected {summary.rows} x {summary.dim_in} -> {summary.dim_out} embeddings -> {output}",
        highlight=False,
    )
    if ledger is not None:
        err_console.print(
            f"ledger {ledger}: recorded {summary.rows} release(s), {summary.free} free (keyed "
            f"re-release of unchanged content), {summary.fresh} charged",
            highlight=False,
        )
    _print_guarantee(mech)
    err_console.print(summary.charge, highlight=False)
    _print_note(note)


def _setting_note(mech: Any, dim: int | None) -> Any:
    """The expected mean cosine and warnings for a setting (None without a dimension)."""
    if dim is None or dim < 2:
        return None
    from .evaluation.advice import setting_note

    return setting_note(mech, dim)


def _print_note(note: Any) -> None:
    if note is None:
        return
    err_console.print(note.summary(), highlight=False)
    for line in note.notes:
        err_console.print(f"[yellow]note:[/yellow] {line}", highlight=False)


def _print_guarantee(mech: Any) -> None:
    err_console.print(f"mechanism: {mech!r}", highlight=False)
    err_console.print(f"guarantee: {mech.guarantee.describe()}", highlight=False)


@app.command()
@user_errors
def info(
    file: Annotated[Path, typer.Argument(help="An embeddings file.")],
    column: Annotated[str | None, typer.Option(help="Embedding column (Parquet).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rows, dimension, norms and privembed metadata of an embeddings file."""
    from .io import iter_batches

    _n, dim, meta, batches = iter_batches(file, column=column)
    norms_min, norms_max, norms_sum, bad, zero, dtype, rows = math.inf, 0.0, 0.0, 0, 0, None, 0
    for b in batches:
        X = np.asarray(b.X, dtype=np.float64)
        dtype = dtype or str(b.X.dtype)
        finite = np.isfinite(X).all(axis=1)
        bad += int((~finite).sum())
        nr = np.linalg.norm(X[finite], axis=1)
        zero += int((nr == 0).sum())
        if nr.size:
            norms_min, norms_max = min(norms_min, float(nr.min())), max(norms_max, float(nr.max()))
            norms_sum += float(nr.sum())
        rows += X.shape[0]
        dim = X.shape[1]
    good = rows - bad
    report = {
        "file": str(file),
        "rows": rows,
        "dim": dim,
        "dtype": dtype,
        "norm_min": norms_min if good else None,
        "norm_mean": norms_sum / good if good else None,
        "norm_max": norms_max if good else None,
        "nonfinite_rows": bad,
        "zero_rows": zero,
        "metadata": meta,
    }
    if as_json:
        from ._cli.common import print_json

        print_json(report)
        return
    t = Table(title=str(file), show_header=False)
    for key in (
        "rows",
        "dim",
        "dtype",
        "norm_min",
        "norm_mean",
        "norm_max",
        "nonfinite_rows",
        "zero_rows",
    ):
        v = report[key]
        t.add_row(key, f"{v:.6g}" if isinstance(v, float) else str(v))
    for key, v in meta.items():
        if key == "guarantee":
            continue
        t.add_row(key, json.dumps(v) if isinstance(v, dict | list) else str(v))
    console.print(t)


@app.command()
@user_errors
def demo(
    n: Annotated[int, typer.Option(help="Number of synthetic notes.")] = 300,
    seed: Annotated[int, typer.Option(help="Seed of the corpus and the noise.")] = 0,
    model: Annotated[str | None, typer.Option(help="Embedding model.")] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Also write the summary as JSON.")
    ] = None,
) -> None:
    """The main job on a bundled sample: synthetic clinical notes, embedded, protected, measured."""
    from .demo import run_demo

    if n < 10:
        fail(f"n must be >= 10, got n={n}.")
    res = run_demo(
        n=n,
        seed=seed,
        model=model,
        on_step=lambda m: err_console.print(f"[dim]- {m}[/dim]", highlight=False),
    )
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
    if output is not None:
        from .io import atomic_output

        with atomic_output(output) as tmp:
            tmp.write_text(
                json.dumps({**res, "rows": [r.to_dict() for r in res["rows"]]}, indent=2)
            )


@app.command()
@user_errors
def keygen(
    output: Annotated[Path, typer.Option("-o", "--output", help="Key file to create (mode 0600).")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing key file.")] = False,
) -> None:
    """Create a 256-bit secret key for keyed (repeat-safe) noise."""
    from .keyed import keygen as _keygen

    kid = _keygen(output, overwrite=overwrite)
    err_console.print(f"wrote key {output} (key id {kid}); keep it secret and backed up")


@app.command()
def version() -> None:
    """Print the privembed version."""
    from . import __version__

    console.print(__version__)


__import__("privembed._cli.evaluate", fromlist=["register"]).register(app)
_register_subapps()

from ._cli.stores import register as _register_stores  # noqa: E402 - after the app exists

_register_stores(app)


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
