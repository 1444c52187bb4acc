"""``privembed advise``: per deployment mode (plain, rerank, subspace+rerank, query), the
smallest epsilon at which search stays useful, its cost per query and the threats it defends
against; ``--plain-only``: the former analysis of plain protected vectors under attack ceilings.

Example::

    privembed advise emb.parquet --min-recall 0.9 --max-bytes-per-query 4e6
    privembed advise emb.parquet --queries queries.npy --basis public.npy --json
    privembed advise notes.jsonl --plain-only --min-overlap 0.3      # texts: embedded first

The work is :func:`privembed.evaluation.modes.advise_modes` (and
:func:`privembed.evaluation.advice.advise`); this module parses and prints. Attach it with
``register(app)``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from .common import (
    OptionGroup,
    console,
    err_console,
    print_json,
    progress_done,
    show_progress,
    user_errors,
    with_option_groups,
)
from .evaluate import (
    MECHANISM_CHOICES,
    OptCeiling,
    OptColumn,
    OptLinkage,
    OptNQueries,
    OptReidMultiple,
    OptTexts,
    TokenAttackOptions,
    parse_names,
    read_clean_embeddings,
)
from .options import (
    OptJson,
    OptMinCosine,
    OptModel,
    OptRuns,
    OptRunSeed,
    basis_epsilon_flag,
    basis_flag,
    delta_flag,
    mechanisms_flag,
    min_overlap_flag,
    profile_flag,
)

__all__ = ["advise", "register"]

# ---- options grouped with the helper that reads them -----------------------------------------
# the former analysis instead of the modes (_goal_and_ceilings)
_OptPlainOnly = Annotated[
    bool,
    typer.Option(
        "--plain-only",
        help="The former analysis: plain protected vectors only, under attack ceilings "
        "(--target, --min-overlap and --ceiling need it).",
    ),
]


@dataclasses.dataclass
class UtilityTarget(OptionGroup):
    """What search must keep: a mean cosine (the modes and --plain-only), or for --plain-only a
    knn overlap or any metric's floor (_goal_and_ceilings)."""

    min_cosine: OptMinCosine = None
    min_overlap: Annotated[
        float | None,
        min_overlap_flag(help="Utility target: knn_overlap@10 (10 nearest neighbours kept)."),
    ] = None
    target: Annotated[
        str | None, typer.Option(help="Utility target as 'metric>=value', e.g. 'ndcg@10>=0.4'.")
    ] = None


@dataclasses.dataclass
class Modes(OptionGroup):
    """The deployment modes advise judges (_advise_modes), the recall each must keep, and the
    largest k' it may fetch."""

    modes: Annotated[
        str,
        typer.Option(
            help="Comma-separated deployment modes, any of: sealed, plain, rerank, "
            "subspace+rerank, query."
        ),
    ] = "sealed,plain,rerank,subspace+rerank,query"
    min_recall: Annotated[
        float,
        typer.Option(help="Utility floor: recall of the clean top 10 within the k' fetched."),
    ] = 0.9
    max_depth: Annotated[
        int | None,
        typer.Option(
            help="Largest k' (candidates fetched and payloads opened per query) outright; by "
            "default k' follows from the cost budget and the corpus size."
        ),
    ] = None

    def chosen(self) -> list[str]:
        """The modes named in ``--modes``, in their order."""
        return [m.strip() for m in self.modes.split(",") if m.strip()]


_OptMaxBytes = Annotated[
    float,
    typer.Option(
        "--max-bytes-per-query",
        help="Cost budget: bytes a query may fetch (candidates' vectors and sealed payloads).",
    ),
]
_OptMaxSync = Annotated[
    float,
    typer.Option(
        "--max-sync-bytes",
        help="Cost budget of the sealed mode: bytes a client may fetch once per session (every "
        "payload) to answer queries from the opened vectors.",
    ),
]
_OptClientCache = Annotated[
    bool,
    typer.Option(
        "--client-cache/--no-client-cache",
        help="Whether a sealed client keeps the opened vectors between queries (without: every "
        "query fetches every payload, within --max-bytes-per-query).",
    ),
]
_OptProductionSize = Annotated[
    int | None,
    typer.Option(
        "--production-size",
        help="The corpus size you will index: predict k' and bytes per query there (the cost "
        "law, measured on subsets of this corpus).",
    ),
]
_OptMaxLatency = Annotated[
    float | None,
    typer.Option(
        "--max-latency-ms",
        help="Cost budget: estimated milliseconds per query on this machine (scan + opening).",
    ),
]


@dataclasses.dataclass
class CostBudget(OptionGroup):
    """What a deployment mode may cost per query and per session (_advise_modes' ``budget``),
    and the corpus size the cost is predicted at."""

    max_bytes_per_query: _OptMaxBytes = 4_000_000
    max_latency_ms: _OptMaxLatency = None
    max_sync_bytes: _OptMaxSync = 64_000_000
    client_cache: _OptClientCache = True
    production_size: _OptProductionSize = None


_OptQueries = Annotated[
    Path | None,
    typer.Option(
        help="Query embeddings (.npy/.npz/.parquet/.jsonl); without them documents stand "
        "in (pseudo-queries)."
    ),
]
_OptBasis = Annotated[
    Path | None,
    basis_flag(
        help="Public embeddings (or a saved basis) for the subspace mode; without it the "
        "basis is DP-PCA of the data, charged to every record."
    ),
]
_OptBasisEpsilon = Annotated[
    float, basis_epsilon_flag(help="Central epsilon of the DP-PCA basis (no --basis).")
]


@dataclasses.dataclass
class ModeBasis(OptionGroup):
    """The basis of the subspace mode: public embeddings or a saved basis, else DP-PCA of the
    data at ``--basis-epsilon``."""

    basis: _OptBasis = None
    basis_epsilon: _OptBasisEpsilon = 1.0

    def read(self, column: str | None) -> Any:
        """The basis ``--basis`` names, or its public embeddings (None without one)."""
        if self.basis is None:
            return None
        from ..data.io import read_embeddings
        from ..mechanisms.subspace import SubspaceBasis

        if SubspaceBasis.is_basis_file(self.basis):
            return SubspaceBasis.load(self.basis)
        return np.asarray(read_embeddings(self.basis, column=column).X)


_OptMaxLdpEpsilon = Annotated[
    float | None,
    typer.Option(help="Recommend only settings with per-record LDP epsilon at most this."),
]


@user_errors
@with_option_groups
def advise(
    *,
    input: Annotated[
        Path,
        typer.Argument(
            help="Embeddings (.parquet/.npy/.npz/.jsonl), or texts (JSONL, CSV or Parquet with "
            "'text' and optional 'sensitive', or .txt), which are embedded first and also feed "
            "the token attack."
        ),
    ],
    utility: UtilityTarget,
    mechanisms: Annotated[
        str,
        mechanisms_flag(
            help=f"Comma-separated mechanisms, any of: {MECHANISM_CHOICES} (mahalanobis needs "
            "--profile)."
        ),
    ] = "gaussian,laplace,purkayastha",
    texts: OptTexts = None,
    profile: Annotated[Path | None, profile_flag(help="Concept profile for mahalanobis.")] = None,
    delta: Annotated[float, delta_flag(help="delta of the Gaussian mechanism.")] = 1e-5,
    ceiling: OptCeiling = None,
    reid_multiple: OptReidMultiple = 5.0,
    linkage: OptLinkage = True,
    token_attack: TokenAttackOptions,
    runs: OptRuns = 3,
    seed: OptRunSeed = 0,
    n_queries: OptNQueries = 2000,
    column: OptColumn = None,
    model: OptModel = None,
    modes: Modes,
    budget: CostBudget,
    queries: _OptQueries = None,
    subspace: ModeBasis,
    max_ldp_epsilon: _OptMaxLdpEpsilon = None,
    plain_only: _OptPlainOnly = False,
    as_json: OptJson = False,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Also write the recommendation as JSON (what evaluate writes as advice.json and "
            "'serve --init --from-advice' reads).",
        ),
    ] = None,
) -> None:
    """Per deployment mode, the smallest epsilon at which search stays useful, its cost and the
    threats it defends against."""
    from ..data.io import check_input_format
    from ..evaluation import Linkage, UtilityEvaluator
    from ..evaluation.advice import advise as run_advice

    check_input_format(input)
    goal, ceilings = _goal_and_ceilings(utility, ceiling, plain_only)
    names = parse_names(mechanisms)
    params = _mechanism_params(names, delta, profile)
    X, all_texts, sensitive, model_name = _vectors_and_texts(
        input, texts, column=column, model=model
    )
    token = _token_attacks(X, all_texts, sensitive, token_attack, seed=seed)
    if not plain_only:
        _advise_modes(
            X, modes=modes, names=names, delta=delta, min_cosine=utility.min_cosine,
            queries=queries,
            subspace=subspace,
            budget=dataclasses.asdict(budget), max_ldp_epsilon=max_ldp_epsilon, seed=seed,
            column=column, as_json=as_json, attacks=token, model=model_name, save=save,
        )  # fmt: skip
        return
    attacks: list[Any] = [*([Linkage()] if linkage else []), *token]
    ev = UtilityEvaluator(X, n_queries=None if not n_queries else n_queries)
    result = run_advice(
        X, target=goal, mechanisms=names, params=params, attacks=attacks, ceilings=ceilings,
        reid_multiple=reid_multiple, runs=runs, seed=seed, evaluator=ev,
        on_step=None if as_json else (lambda m: err_console.print(f"[dim]- {m}[/dim]")),
    )  # fmt: skip
    if as_json:
        print_json(result.to_dict())
        return
    _print(result)


def _goal_and_ceilings(
    utility: UtilityTarget,
    ceiling: list[str] | None,
    plain_only: bool,
) -> tuple[Any, list[Any] | None]:
    """The utility target of ``--plain-only`` (default: a mean cosine of 0.5) and its attack
    ceilings (None: the defaults); the mode advice refuses the options only it takes."""
    from ..evaluation.recommend import Floor, parse_floors

    min_cosine, min_overlap, target = utility.min_cosine, utility.min_overlap, utility.target
    if not plain_only:
        for flag, val in (("--target", target), ("--min-overlap", min_overlap),
                          ("--ceiling", ceiling)):  # fmt: skip
            if val:
                raise ValueError(f"{flag} applies to --plain-only (plain vectors under attack "
                                 "ceilings); the mode advice takes --min-recall.")  # fmt: skip
    given = [t for t in (min_cosine, min_overlap, target) if t is not None]
    if len(given) > 1:
        raise ValueError("give one utility target: --min-cosine, --min-overlap or --target.")
    if target is not None:
        (goal,) = parse_floors([target])
    elif min_overlap is not None:
        goal = Floor("knn_overlap@10", ">=", min_overlap)
    else:
        goal = Floor("mean_cosine", ">=", 0.5 if min_cosine is None else min_cosine)
    return goal, parse_floors(ceiling) if ceiling else None


def _token_attacks(
    X: Any, texts: list[str] | None, sensitive: Any, options: TokenAttackOptions, *, seed: int
) -> list[Any]:
    """The token attack on the texts behind the vectors (none without texts), with the audit
    settings and ``--attack-epochs``/``--attack-lr``."""
    if texts is None:
        return []
    from ..evaluation.pipeline import token_attack

    aux, attack = options.aux_fraction, options.settings()
    return [token_attack(X, texts, sensitive, aux_fraction=aux, seed=seed, attack=attack)]


def _mechanism_params(names: list[str], delta: float, profile: Path | None) -> dict[str, Any]:
    """The mechanisms' parameters: delta of the Gaussian, the concept profile of mahalanobis."""
    params: dict[str, dict[str, Any]] = {"gaussian": {"delta": delta}}
    if "mahalanobis" in names:
        if profile is None:
            raise ValueError(
                "mahalanobis needs a concept profile (--profile); without one it is the Laplace "
                "mechanism."
            )
        params["mahalanobis"] = {"profile": str(profile)}
    return params


def _vectors_and_texts(
    input: Path, texts: Path | None, *, column: str | None, model: str | None
) -> tuple[Any, list[str] | None, Any, str | None]:
    """The clean vectors of INPUT (texts are embedded here), the texts behind them with their
    sensitive tokens, for the token attack (None when there are none), and the embedding model's
    name (from the file's metadata or the embedder; None when unknown), which decides whether
    the project's stored evidence may support a "defends"."""
    from ..data.io import holds_texts
    from ..evaluation.pipeline import read_attack_texts

    if not holds_texts(input):
        X, ids, metadata = read_clean_embeddings(input, column)
        name = metadata.get("embedding_model") or metadata.get("model")
        name = None if name is None else str(name)
        if texts is None:
            return X, None, None, name
        all_texts, sensitive = read_attack_texts(texts, ids)
        return X, all_texts, sensitive, name
    from ..data.embedders import Embedder
    from ..data.io import read_texts

    sensitive = None
    _ids, all_texts = read_texts(input)
    if input.suffix.lower() in (".jsonl", ".ndjson"):
        ids = [str(i) for i in (_ids if _ids and _ids[0] is not None else range(len(all_texts)))]
        all_texts, sensitive = read_attack_texts(input, ids)
    err_console.print(f"embedding {len(all_texts)} texts", highlight=False)
    emb = Embedder(model)
    with progress_done("embedding", len(all_texts), unit="texts") as on_progress:
        X = np.asarray(emb.encode(all_texts, on_progress=on_progress))
    return X, all_texts, sensitive, str(emb.metadata().get("embedding_model"))


def _advise_modes(
    X: Any,
    *,
    modes: Modes,
    names: list[str],
    delta: float,
    min_cosine: float | None,
    queries: Path | None,
    subspace: ModeBasis,
    max_ldp_epsilon: float | None,
    seed: int,
    column: str | None,
    as_json: bool,
    attacks: list[Any],
    model: str | None = None,
    budget: dict[str, Any] | None = None,
    save: Path | None = None,
) -> None:
    from ..data.io import read_embeddings
    from ..evaluation.modes import advise_modes

    chosen = modes.chosen()
    Q = None
    if queries is not None:
        Q = np.asarray(read_embeddings(queries, column=column).X)
    B = subspace.read(column)
    total = len(chosen) * len(names)
    with progress_done("advise", total, unit="settings") as on_progress:
        done = [0]

        def step(msg: str) -> None:
            if msg.endswith("searching the smallest epsilon"):
                on_progress(done[0])
                done[0] += 1
            if not show_progress() and not as_json:  # one line per mode/mechanism
                err_console.print(f"- {msg}", highlight=False, markup=False)

        result = advise_modes(
            X, queries=Q, modes=chosen, mechanisms=names, params={"gaussian": {"delta": delta}},
            min_recall=modes.min_recall, min_cosine=min_cosine, max_depth=modes.max_depth,
            max_ldp_epsilon=max_ldp_epsilon, **(budget or {}), basis=B,
            basis_epsilon=subspace.basis_epsilon, seed=seed,
            attacks=attacks, model=model, on_step=step,
        )  # fmt: skip
        on_progress(total)
    if save is not None:
        result.save(save)
    if as_json:
        print_json(result.to_dict())
        return
    for line in result.lines():
        for part in _wrap(line):
            console.print(part, highlight=False, markup=False, soft_wrap=True)


def _wrap(line: str) -> list[str]:
    """A line wrapped at the console's width on spaces only (never inside a word)."""
    import textwrap

    if not line:
        return [""]
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(
        line, width=max(console.width, 40), subsequent_indent=indent + "    ",
        break_long_words=False, break_on_hyphens=False,
    ) or [""]  # fmt: skip


def _print(result: Any) -> None:
    for line in result.lines():
        for part in _wrap(line):
            console.print(part, highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach the ``advise`` command to the main app: ``register(app)`` in ``privembed.cli``."""
    app.command(name="advise")(advise)
