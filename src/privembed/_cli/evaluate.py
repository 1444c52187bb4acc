"""``privembed evaluate``: sweep mechanisms x epsilon x runs on your embeddings, write a report.

Example::

    privembed evaluate emb.parquet --mechanisms gaussian,laplace,mahalanobis,purkayastha \\
        --runs 5 -o report/ --min-overlap 0.5 --texts corpus.jsonl

writes ``report/index.html`` (self-contained), the plots as PNG and SVG, ``results.csv`` /
``results.parquet`` / ``results.json`` (tidy: one row per configuration and metric) and
``runs.csv``; ``report/runs.jsonl`` lets an interrupted sweep resume where it stopped. The
command only parses and prints: the work is :func:`privembed.evaluation.pipeline.evaluate_embeddings`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
import typer

from ..release import refuse_protected
from .common import (
    MechanismName,
    OptionGroup,
    console,
    err_console,
    parse_floats,
    progress_callback,
    user_errors,
    with_option_groups,
)
from .options import (
    OptColumn,
    OptMinCosine,
    OptModel,
    OptRuns,
    OptRunSeed,
    attack_epochs_flag,
    attack_lr_flag,
    aux_fraction_flag,
    ceiling_flag,
    delta_flag,
    epsilon_flag,
    k_flag,
    mechanisms_flag,
    min_overlap_flag,
    n_queries_flag,
    output_flag,
    profile_flag,
    reid_multiple_flag,
)

__all__ = [
    "MECHANISM_CHOICES",
    "OptAttackEpochs",
    "OptAttackLr",
    "OptAuxFraction",
    "OptCeiling",
    "OptColumn",
    "OptLinkage",
    "OptNQueries",
    "OptReidMultiple",
    "OptTexts",
    "evaluate",
    "parse_names",
    "print_attack_checks",
    "print_recommendation",
    "read_clean_embeddings",
    "register",
    "token_attack_settings",
]

#: the values of the comma-separated --mechanisms (every registered mechanism)
MECHANISM_CHOICES = ", ".join(get_args(MechanismName))
_AUDIT = "default: the audit settings, 40 epochs at lr 3e-3 (one hidden layer of 256, top-10 rule)"

#: evaluate and advise measure protection on the clean vectors: a protected file is refused
_CLEAN_ONLY = (
    "evaluate and advise protect the clean embeddings themselves to measure what protection "
    "costs and buys; give the unprotected file (measuring protected vectors as if they were "
    "clean reports the wrong utility and attacks)"
)

# ---- the attacks' options, declared alike by evaluate and advise -----------------------------
#: ``--texts``: the texts behind the vectors (options.OTHER_MEANING)
OptTexts = Annotated[
    Path | None,
    typer.Option(
        help="JSONL {'id','text'[,'sensitive']} matching the embedding ids: runs the token "
        "inference (leakage) attack."
    ),
]
#: ``--aux-fraction``
OptAuxFraction = Annotated[
    float,
    aux_fraction_flag(help="Share of the records the token attacker owns (its training set)."),
]
#: ``--attack-epochs``
OptAttackEpochs = Annotated[
    int | None, attack_epochs_flag(help=f"Epochs of the token attack ({_AUDIT}; T26: 20).")
]
#: ``--attack-lr``
OptAttackLr = Annotated[
    float | None,
    attack_lr_flag(help=f"Adam learning rate of the token attack ({_AUDIT}; T26: 1e-4)."),
]
#: ``--linkage/--no-linkage``
OptLinkage = Annotated[
    bool, typer.Option("--linkage/--no-linkage", help="Run the re-identification attack.")
]
#: ``--ceiling``
OptCeiling = Annotated[
    list[str] | None,
    ceiling_flag(help="Attack ceilings instead of the defaults, e.g. 'reid@1<=0.05' (repeatable)."),
]
#: ``--reid-multiple``
OptReidMultiple = Annotated[float, reid_multiple_flag()]
#: ``--n-queries``
OptNQueries = Annotated[
    int | None, n_queries_flag(help="Queries of the ranking metrics (default 2000; 0 = all).")
]
#: ``--column``

# ---- evaluate's own options, grouped with the helper that reads them -------------------------
# a retrieval task instead of INPUT (_task_embeddings)
_OptTask = Annotated[
    Literal["gcide"] | None,
    typer.Option(
        help="A real retrieval task instead of INPUT: gcide (Debian's dict-gcide: usage "
        "quotes find the definition they illustrate; adds NDCG@10 of plain queries over "
        "the protected corpus)."
    ),
]
_OptTaskSplit = Annotated[
    Literal["dev", "test"],
    typer.Option(help="Queries of the task: tune on dev; report test once, at the end."),
]
_OptTaskPath = Annotated[
    Path | None,
    typer.Option(help="Folder of the task's data (default: $PRIVEMBED_GCIDE, /usr/share/dictd)."),
]
_OptTaskDocs = Annotated[
    int, typer.Option(help="Corpus size: every relevant document plus a fixed sample (0: all).")
]
# the grid of the sweep, comma-separated (_grid; each mechanism's own: MechanismParameters)
_OptEpsilons = Annotated[
    str | None,
    epsilon_flag(
        help="Comma-separated epsilons (default: per mechanism, from theory: where the "
        "expected mean cosine is 0.1, 0.3, 0.5, 0.7, 0.9 for the data's dimension)."
    ),
]
# the utility floors (Judgement)
_OptMinOverlap = Annotated[
    float | None,
    min_overlap_flag(
        help="Utility floor on knn_overlap@10 (share of each record's 10 nearest neighbours "
        "kept; default floor 0.5 when no other utility floor is given)."
    ),
]
_OptMinTop1 = Annotated[
    float | None,
    typer.Option(
        hidden=True,
        help="Refused: top-1 self-retrieval is the re-identification rate, not a utility.",
    ),
]
_OptFloor = Annotated[
    list[str] | None,
    typer.Option(
        help="More utility floors, e.g. 'sts_pearson>=0.7' (repeatable; 'metric<=value' "
        "adds an attack ceiling)."
    ),
]


def parse_names(text: str) -> list[str]:
    """The names of a comma-separated list (``--mechanisms``; ``--calibration`` too, whose
    error names mechanisms as well)."""
    out = [t.strip() for t in text.split(",") if t.strip()]
    if not out:
        raise ValueError(f"mechanisms must not be empty, got mechanisms={text!r}.")
    return out


def token_attack_settings(epochs: int | None, lr: float | None) -> dict[str, Any]:
    """The token attack's settings: the audit settings, with ``--attack-epochs`` and
    ``--attack-lr`` when given."""
    from ..attacks.token_inference import AUDIT_SETTINGS

    attack = {k: list(v) if isinstance(v, tuple) else v for k, v in AUDIT_SETTINGS.items()}
    if epochs is not None:
        attack["epochs"] = epochs
    if lr is not None:
        attack["lr"] = lr
    return attack


@dataclasses.dataclass
class MechanismParameters(OptionGroup):
    """Each mechanism's own parameters: the values swept (comma-separated) and the concept
    profile of mahalanobis."""

    sigma: Annotated[
        str | None,
        typer.Option(help="Comma-separated sigmas of the empirical mechanism (default: theory)."),
    ] = None
    calibration: Annotated[
        str, typer.Option(help="Gaussian calibrations, comma-separated, any of: analytic, classic.")
    ] = "analytic"
    k: Annotated[str | None, k_flag(help="Projection output dimensions, comma-separated.")] = None
    profile: Annotated[
        Path | None,
        profile_flag(help="Concept profile / mask for mahalanobis (default: Sigma = I)."),
    ] = None
    smoothing: Annotated[
        str | None, typer.Option(help="Mahalanobis covariance smoothing values, comma-separated.")
    ] = None
    mask_delta: Annotated[
        str | None,
        typer.Option(
            help="Mahalanobis mask_delta values (Sigma = diag(m + delta)), comma-separated "
            "(default: the mechanism's default)."
        ),
    ] = None

    def axes(self) -> dict[str, Any]:
        """The swept values, parsed from their comma-separated lists."""
        return {
            "sigma": _floats("sigma", self.sigma),
            "calibration": parse_names(self.calibration),
            "k": None if self.k is None else [int(v) for v in parse_floats("k", self.k)],
            "smoothing": _floats("smoothing", self.smoothing),
            "mask_delta": _floats("mask_delta", self.mask_delta),
        }


def _floats(name: str, text: str | None) -> list[float] | None:
    """A comma-separated list of numbers (None when not given)."""
    return None if text is None else parse_floats(name, text)


@dataclasses.dataclass
class Judgement(OptionGroup):
    """What a setting is judged by: the utility floors it must keep (``--min-overlap``,
    ``--min-cosine``, ``--floor``) and the attack ceilings it must stay under (``--ceiling``)."""

    min_overlap: _OptMinOverlap = None
    min_cosine: OptMinCosine = None
    min_top1: _OptMinTop1 = None
    floor: _OptFloor = None
    ceiling: OptCeiling = None

    def floors_and_ceilings(self) -> tuple[list[Any], list[Any] | None]:
        """The utility floors and the attack ceilings (None: the defaults)."""
        from ..evaluation.recommend import Floor, parse_floors

        if self.min_top1 is not None:
            raise ValueError(
                "--min-top1 floors top-1 self-retrieval, which is the re-identification rate "
                "(the share of protected vectors linked back to their own record), not a "
                "utility; use --min-overlap (knn_overlap@10), --min-cosine or --floor "
                "'sts_pearson>=0.5'."
            )
        floors: list[Floor] = []
        if self.min_overlap is not None:
            floors.append(Floor("knn_overlap@10", ">=", self.min_overlap))
        if self.min_cosine is not None:
            floors.append(Floor("mean_cosine", ">=", self.min_cosine))
        floors += parse_floors(self.floor or [])
        ceilings = parse_floors(self.ceiling) if self.ceiling else None
        if ceilings and any(c.op != "<=" for c in ceilings):
            raise ValueError(f"a ceiling must look like 'metric<=value', got {self.ceiling!r}.")
        return floors, ceilings


@dataclasses.dataclass
class TokenAttackOptions(OptionGroup):
    """The token attack's knobs (evaluate, advise): the attacker's share of the records, and its
    training -- the audit settings unless told otherwise."""

    aux_fraction: OptAuxFraction = 0.5
    attack_epochs: OptAttackEpochs = None
    attack_lr: OptAttackLr = None

    def settings(self) -> dict[str, Any]:
        """The attack's settings (:func:`token_attack_settings`)."""
        return token_attack_settings(self.attack_epochs, self.attack_lr)


def read_clean_embeddings(
    path: Path, column: str | None
) -> tuple[np.ndarray, list[str], dict[str, Any]]:
    """The embeddings of ``path``, their ids as text (row numbers where it has none) and its
    metadata; a protected file is refused (evaluate and advise protect the clean vectors)."""
    from ..data.io import read_embeddings

    table = read_embeddings(path, column=column)
    refuse_protected(table.metadata, path, hint=_CLEAN_ONLY)
    X = np.asarray(table.X)
    ids = [str(i) for i in (table.ids if table.ids is not None else range(X.shape[0]))]
    return X, ids, table.metadata


@user_errors
@with_option_groups
def evaluate(
    *,
    output: Annotated[Path, output_flag(help="Report folder.")],
    input: Annotated[
        Path | None,
        typer.Argument(help="Embeddings (.parquet/.npy/.npz/.jsonl); or give --task."),
    ] = None,
    task: _OptTask = None,
    task_split: _OptTaskSplit = "dev",
    task_path: _OptTaskPath = None,
    task_docs: _OptTaskDocs = 20_000,
    task_queries: Annotated[int, typer.Option(help="Queries of the task (a fixed sample).")] = 500,
    model: OptModel = None,
    mechanisms: Annotated[
        str, mechanisms_flag(help=f"Comma-separated mechanisms, any of: {MECHANISM_CHOICES}.")
    ] = "gaussian,laplace,mahalanobis,purkayastha",
    epsilon: _OptEpsilons = None,
    runs: OptRuns = 5,
    seed: OptRunSeed = 0,
    delta: Annotated[float, delta_flag(help="delta of gaussian/projection.")] = 1e-5,
    own: MechanismParameters,
    judgement: Judgement,
    reid_multiple: OptReidMultiple = 5.0,
    texts: OptTexts = None,
    token_attack: TokenAttackOptions,
    linkage: OptLinkage = True,
    n_queries: OptNQueries = 2000,
    restart: Annotated[bool, typer.Option(help="Ignore results of an earlier run.")] = False,
    column: OptColumn = None,
    title: Annotated[str | None, typer.Option(help="Report title.")] = None,
) -> None:
    """Measure privacy-utility trade-offs on your embeddings and write an HTML report."""
    from ..evaluation.pipeline import evaluate_embeddings, read_attack_texts

    floors, ceilings = judgement.floors_and_ceilings()
    attack = token_attack.settings()
    if (input is None) == (task is None):
        raise ValueError("give the embeddings (INPUT) or --task, one of them.")
    retrieval = None
    if task is not None:
        X, ids, retrieval, description = _task_embeddings(
            task, task_split, task_path, task_docs, task_queries, model
        )
        name = f"{task} ({task_split})"
    else:
        assert input is not None
        X, ids, description = _input_embeddings(input, column)
        name = input.name
    all_texts, sensitive = read_attack_texts(texts, ids) if texts is not None else (None, None)
    if texts is not None:
        description["texts file"] = texts.name
    with _sweep_progress() as on_progress:
        run = evaluate_embeddings(
            X, output, **_grid(mechanisms, epsilon, own),
            runs=runs, seed=seed, delta=delta, profile=own.profile, floors=floors, ceilings=ceilings,
            reid_multiple=reid_multiple, linkage=linkage, texts=all_texts, sensitive=sensitive,
            aux_fraction=token_attack.aux_fraction, attack=attack, n_queries=n_queries, restart=restart,
            description=description, title=title or f"privembed evaluation of {name}",
            on_progress=on_progress, retrieval=retrieval,
            model=description.get("embedding model")
            or description.get("file metadata: embedding_model"),
        )  # fmt: skip
    print_attack_checks(run.result.checks.values())
    print_recommendation(run.result, run.recommendation)
    if run.deployment is not None:  # the same recommendation as 'privembed advise'
        console.print("Deployment (as 'privembed advise' recommends for these embeddings):")
        for line in [run.deployment.sentence(), *run.deployment.threat_lines()]:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    err_console.print(f"wrote {run.report}")


def _input_embeddings(path: Path, column: str | None) -> tuple[Any, list[str], dict[str, Any]]:
    """The clean embeddings of INPUT, their ids, and what the report says of the file."""
    X, ids, metadata = read_clean_embeddings(path, column)
    description = {"source": path.name}
    for key in ("embedding_model", "model", "source", "protected"):
        if key in metadata:
            description[f"file metadata: {key}"] = metadata[key]
    return X, ids, description


def _grid(mechanisms: str, epsilon: str | None, own: MechanismParameters) -> dict[str, Any]:
    """The axes of the sweep, parsed from their comma-separated lists."""
    return {
        "mechanisms": parse_names(mechanisms),
        "epsilon": _floats("epsilon", epsilon),
        **own.axes(),
    }


@contextlib.contextmanager
def _sweep_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress bar of the sweep's runs (on a terminal), driven by ``on_progress(done, total)``."""
    with progress_callback("sweeping", unit="runs") as (set_total, advance):
        state = {"done": 0}

        def on_progress(done: int, total: int) -> None:
            set_total(total)
            advance(done - state["done"])
            state["done"] = done

        yield on_progress


def _task_embeddings(
    task: str,
    split: str,
    path: Path | None,
    n_docs: int,
    n_queries: int,
    model: str | None,
) -> tuple[Any, list[str], Any, dict[str, Any]]:
    """Load and embed a retrieval task (corpus subset, query sample) with a progress bar."""
    from ..data.embedders import Embedder
    from ..evaluation.loaders import gcide_retrieval
    from ..evaluation.pipeline import embed_retrieval_task
    from .common import progress_callback

    if n_docs < 0 or n_queries < 1:
        raise ValueError(
            f"--task-docs must be >= 0 and --task-queries >= 1, got {n_docs} and {n_queries}."
        )
    full = gcide_retrieval(path, split=split, max_queries=n_queries)
    t = full.subset(n_docs or None)
    emb = Embedder(model)
    with progress_callback("embedding the task") as (set_total, advance):
        set_total(len(t.doc_texts) + len(t.query_texts))
        state = {"done": 0}

        def on_progress(done: int) -> None:
            advance(done - state["done"])
            state["done"] = done

        X, ids, retrieval = embed_retrieval_task(t, emb, on_progress=on_progress)
    description = {
        "source": f"{task}, {split} split: {len(t.query_ids)} queries over {len(t.doc_ids)} "
        f"of {len(full.doc_ids)} documents (every relevant one plus a fixed sample)",
        "embedding model": str(emb.metadata().get("embedding_model")),
    }
    return X, ids, retrieval, description


def print_attack_checks(checks: Any) -> None:
    """One line per attack: its numbers on unprotected data and its verdict."""
    for c in checks:
        style = "green" if c.passed else "bold yellow"
        console.print(f"[{style}]attack check[/{style}] {c.text()}", highlight=False)


def _config_table(title: str) -> Any:
    from rich.table import Table

    t = Table(title=title)
    # the configuration name identifies the row: never truncated, wrapped if it must be
    t.add_column("configuration", overflow="fold", no_wrap=False, min_width=12)
    t.add_column("guarantee", overflow="fold")
    return t


def print_recommendation(result: Any, rec: Any) -> None:
    """The recommendation's sentence, its configurations (or the nearest on each side)."""
    from ..evaluation.privacy import WEAK_ATTACK

    console.print(rec.sentence(result), highlight=False)
    shown = (
        rec.pareto
        if rec.feasible
        else [c for c in (rec.nearest_utility, rec.nearest_attack) if c is not None]
    )
    if shown:
        cols = list(
            dict.fromkeys(
                [*rec.utility_axes, *(f.metric for f in rec.requirements), "reid@1", "leakage"]
            )
        )
        cols = [c for c in cols if c in result.metric_names()]
        t = _config_table("Recommended" if rec.feasible else "Nearest on each side of the frontier")
        for c in cols:
            head = c + (" (too weak)" if result.attack_status(c) == WEAK_ATTACK else "")
            t.add_column(head, justify="right", overflow="fold")
        for cfg in shown:
            vals = []
            for c in cols:
                mean, std, n = result.stats(cfg, c)
                vals.append(f"{mean:.3f}" + (f" ± {std:.3f}" if n > 1 and np.isfinite(std) else ""))
            t.add_row(cfg.label, result.guarantee(cfg).short(), *vals)
        console.print(t)
    for line in rec.nearest_lines(result):
        console.print(f"  {line}", highlight=False)
    for line in rec.ignored:
        console.print(f"[yellow]note:[/yellow] {line}", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach the ``evaluate`` command to the main app."""
    app.command(name="evaluate")(evaluate)
