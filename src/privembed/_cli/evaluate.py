"""``privembed evaluate``: sweep mechanisms x epsilon x runs on your embeddings, write a report.

Example::

    privembed evaluate emb.parquet --mechanisms gaussian,laplace,mahalanobis,purkayastha \\
        --epsilon 1,5,10,20,50 --runs 5 -o report/ --min-top1 0.9 --texts corpus.jsonl

writes ``report/index.html`` (self-contained), the plots as PNG and SVG, ``results.csv`` /
``results.parquet`` / ``results.json`` (tidy: one row per configuration and metric) and
``runs.csv``; ``report/runs.jsonl`` lets an interrupted sweep resume where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from .common import console, err_console, parse_floats, progress_callback, user_errors

__all__ = ["evaluate", "register"]


def _names(text: str) -> list[str]:
    out = [t.strip() for t in text.split(",") if t.strip()]
    if not out:
        raise ValueError(f"mechanisms must not be empty, got mechanisms={text!r}.")
    return out


def _read_texts(path: Path, ids: list[str]) -> tuple[list[str], list[set[str]] | None]:
    """Texts (and optional ``sensitive`` token lists) aligned with the embedding ids."""
    by_id: dict[str, tuple[str, Any]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{lineno}: not a JSON object.") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise ValueError(f"{path}:{lineno}: needs a 'text' string.")
            key = str(obj.get("id", lineno - 1))
            by_id[key] = (obj["text"], obj.get("sensitive"))
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"{path} has no text for {len(missing)} embedding id(s) (first: {missing[0]!r}); "
            "texts are matched to embeddings by 'id'."
        )
    texts = [by_id[i][0] for i in ids]
    sens = [by_id[i][1] for i in ids]
    if all(s is None for s in sens):
        return texts, None
    if any(s is None for s in sens):
        raise ValueError(f"{path}: 'sensitive' is given for some texts but not all.")
    return texts, [{str(t).lower() for t in s} for s in sens]


@user_errors
def evaluate(
    input: Annotated[Path, typer.Argument(help="Embeddings (.parquet/.npy/.npz/.jsonl).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Report folder.")],
    mechanisms: Annotated[
        str, typer.Option(help="Comma-separated mechanisms (see 'privembed protect --help').")
    ] = "gaussian,laplace,mahalanobis,purkayastha",
    epsilon: Annotated[str, typer.Option(help="Comma-separated epsilons.")] = "1,5,10,20,50",
    runs: Annotated[int, typer.Option(help="Independent releases per configuration.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the sweep (every cell reproducible).")] = 0,
    delta: Annotated[float, typer.Option(help="delta of gaussian/projection.")] = 1e-5,
    sigma: Annotated[
        str, typer.Option(help="Comma-separated sigmas of the empirical mechanism.")
    ] = "0.05,0.1,0.2,0.5",
    calibration: Annotated[
        str, typer.Option(help="Gaussian calibrations, comma-separated: analytic,classic.")
    ] = "analytic",
    k: Annotated[
        str | None, typer.Option("--k", help="Projection output dimensions, comma-separated.")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(help="Concept profile / mask for mahalanobis (default: Sigma = I)."),
    ] = None,
    smoothing: Annotated[
        str | None, typer.Option(help="Mahalanobis covariance smoothing values, comma-separated.")
    ] = None,
    mask_delta: Annotated[
        str | None,
        typer.Option(
            help="Mahalanobis mask_delta values (Sigma = diag(m + delta)), comma-separated "
            "(default: the mechanism's default)."
        ),
    ] = None,
    min_top1: Annotated[
        float | None, typer.Option(help="Floor on top-1 self-retrieval for the recommendation.")
    ] = None,
    min_cosine: Annotated[
        float | None, typer.Option(help="Floor on the mean cosine for the recommendation.")
    ] = None,
    floor: Annotated[
        list[str] | None,
        typer.Option(help="More floors, e.g. 'sts_pearson>=0.7' or 'leakage<=0.2' (repeatable)."),
    ] = None,
    texts: Annotated[
        Path | None,
        typer.Option(
            help="JSONL {'id','text'[,'sensitive']} matching the embedding ids: runs the token "
            "inference (leakage) attack."
        ),
    ] = None,
    aux_fraction: Annotated[
        float, typer.Option(help="Share of the records the token attacker owns (its training set).")
    ] = 0.5,
    attack_epochs: Annotated[int, typer.Option(help="Epochs of the token attack (T26: 20).")] = 20,
    attack_lr: Annotated[
        float,
        typer.Option(
            help="Adam learning rate of the token attack (T26: 1e-4; with a few hundred "
            "records it recovers nothing at 20 epochs: try --attack-epochs 40 --attack-lr 3e-3)."
        ),
    ] = 1e-4,
    linkage: Annotated[
        bool, typer.Option("--linkage/--no-linkage", help="Run the re-identification attack.")
    ] = True,
    n_queries: Annotated[
        int | None, typer.Option(help="Queries of the ranking metrics (default 2000; 0 = all).")
    ] = 2000,
    restart: Annotated[bool, typer.Option(help="Ignore results of an earlier run.")] = False,
    column: Annotated[str | None, typer.Option(help="Embedding column (Parquet).")] = None,
    title: Annotated[str | None, typer.Option(help="Report title.")] = None,
) -> None:
    """Measure privacy-utility trade-offs on your embeddings and write an HTML report."""
    from ..evaluation import Linkage, TokenLeakage, UtilityEvaluator, grid, run_sweep
    from ..evaluation.report import Floor, parse_floors, recommend, write_report
    from ..evaluation.sweep import describe_embeddings
    from ..io import read_embeddings
    from ..rng import as_generator

    mechs = _names(mechanisms)
    eps = parse_floats("epsilon", epsilon)
    extra: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    if "gaussian" in mechs:
        cal = _names(calibration)
        if cal != ["analytic"]:
            extra["gaussian"] = {"calibration": cal}
    if "projection" in mechs:
        if k is None:
            raise ValueError("--k is required with the projection mechanism (e.g. --k 64,128).")
        extra["projection"] = {"k": [int(v) for v in parse_floats("k", k)]}
    if "mahalanobis" in mechs:
        m: dict[str, Any] = {}
        if profile is not None:
            if not profile.exists():
                raise FileNotFoundError(f"file not found: {profile}")
            m["profile"] = str(profile)
        else:
            notes.append(
                "mahalanobis was run without a concept profile (--profile): Sigma = I, so it is "
                "the isotropic Laplace mechanism; learn a profile with 'privembed concept'."
            )
        if smoothing is not None:
            m["smoothing"] = parse_floats("smoothing", smoothing)
        if mask_delta is not None:
            m["mask_delta"] = parse_floats("mask_delta", mask_delta)
        if m:
            extra["mahalanobis"] = m
    configs = grid(
        mechs,
        epsilon=eps,
        delta=delta,
        sigma=parse_floats("sigma", sigma) if "empirical" in mechs else None,
        params=extra,
    )
    floors: list[Floor] = []
    if min_top1 is not None:
        floors.append(Floor("top1_originals", ">=", min_top1))
    if min_cosine is not None:
        floors.append(Floor("mean_cosine", ">=", min_cosine))
    floors += parse_floors(floor or [])

    table = read_embeddings(input, column=column)
    X = np.asarray(table.X)
    ids = [str(i) for i in (table.ids if table.ids is not None else range(X.shape[0]))]
    ev = UtilityEvaluator(X, n_queries=None if not n_queries else n_queries)
    privacy: list[Any] = []
    if linkage:
        privacy.append(Linkage())
    if texts is not None:
        all_texts, sensitive = _read_texts(texts, ids)
        n = len(all_texts)
        if not 0 < aux_fraction < 1:
            raise ValueError(f"aux_fraction must be in (0, 1), got aux_fraction={aux_fraction!r}.")
        order = as_generator(seed).permutation(n)
        n_aux = round(aux_fraction * n)
        if n_aux < 2 or n - n_aux < 2:
            raise ValueError(f"{n} texts are too few to split into attacker and target records.")
        aux, tgt = np.sort(order[:n_aux]), np.sort(order[n_aux:])
        privacy.append(
            TokenLeakage(
                texts=[all_texts[i] for i in tgt],
                sensitive=None if sensitive is None else [sensitive[i] for i in tgt],
                aux_texts=[all_texts[i] for i in aux],
                aux_embeddings=X[aux],
                rows=tgt.tolist(),
                attack={"epochs": attack_epochs, "lr": attack_lr},
            )
        )
    output.mkdir(parents=True, exist_ok=True)
    description: dict[str, Any] = {"source": input.name}
    for key in ("embedding_model", "model", "source", "protected"):
        if key in table.metadata:
            description[f"file metadata: {key}"] = table.metadata[key]
    description.update(describe_embeddings(X))
    if texts is not None:
        description["texts"] = (
            f"{texts.name} (token attacker owns {n_aux} records, targets {n - n_aux})"
        )
    with progress_callback("sweeping") as (set_total, advance):
        state = {"done": 0}

        def on_progress(done: int, total: int) -> None:
            set_total(total)
            advance(done - state["done"])
            state["done"] = done

        result = run_sweep(
            X,
            configs,
            runs=runs,
            seed=seed,
            utility=ev,
            privacy=privacy,
            results=output / "runs.jsonl",
            restart=restart,
            on_progress=on_progress,
            description=description,
        )
    result.save(output)
    page = write_report(
        result,
        output,
        floors=floors,
        title=title or f"privembed evaluation of {input.name}",
        notes=notes,
    )
    rec = recommend(result, floors)
    _print_summary(result, rec)
    err_console.print(f"wrote {page}")


def _print_summary(result: Any, rec: Any) -> None:
    from rich.table import Table

    t = Table(title="Recommended" if rec.floors else "Pareto-optimal configurations")
    t.add_column("configuration")
    t.add_column("guarantee")
    # the floored utility and the two headline attack columns (the report has them all)
    cols = rec.utility_axes + [c for c in ("reid@1", "leakage") if c in rec.privacy_axes]
    for c in cols:
        t.add_column(c, justify="right")
    for cfg in rec.pareto:
        vals = []
        for c in cols:
            mean, std, n = result.stats(cfg, c)
            vals.append(f"{mean:.3f}" + (f" ± {std:.3f}" if n > 1 and np.isfinite(std) else ""))
        t.add_row(cfg.label, result.guarantee(cfg).short(), *vals)
    if rec.floors and not rec.feasible:
        console.print("No configuration meets " + ", ".join(f.text() for f in rec.floors) + ".")
    else:
        console.print(t)


def register(app: typer.Typer) -> None:
    """Attach the ``evaluate`` command to the main app."""
    app.command(name="evaluate")(evaluate)
