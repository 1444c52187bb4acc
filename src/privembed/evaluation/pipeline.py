"""``privembed evaluate`` as one library call: grid, attacker split, sweep, recommendation, report.

:func:`evaluate_embeddings` is everything the command does between parsing its options and
printing: it builds the grid (by default from theory: the epsilons at which each mechanism's
expected mean cosine is 0.1, 0.3, 0.5, 0.7 and 0.9 for the data's dimension,
:func:`~privembed.evaluation.advice.theory_grid`), splits the records between the token
attacker and its targets (:func:`attacker_split`), runs the sweep with the attacks, recommends
for the utility floor and the attack ceiling, and writes the tables and the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..attacks.base import attacker_split
from ..core._validation import DataError, check_embeddings
from .advice import DEFAULT_COSINES, theory_grid
from .privacy import Linkage, TokenLeakage
from .recommend import REID_CHANCE_MULTIPLE, Floor, Recommendation, recommend
from .sweep import SweepConfig, SweepResult, describe_embeddings, grid, run_sweep
from .utility import RetrievalTask, UtilityEvaluator

__all__ = [
    "Evaluation",
    "attacker_split",
    "build_configs",
    "embed_retrieval_task",
    "evaluate_embeddings",
    "read_attack_texts",
    "token_attack",
]


def read_attack_texts(
    path: str | Path, ids: Sequence[str]
) -> tuple[list[str], list[set[str]] | None]:
    """Texts (and optional ``sensitive`` token lists) of a JSONL file, aligned with ``ids``.

    Each line is ``{"id": ..., "text": ...[, "sensitive": [...]]}``; a line without ``id`` is
    matched by its position (0-based).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    by_id: dict[str, tuple[str, Any]] = {}
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{p}:{lineno}: not a JSON object.") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise ValueError(f"{p}:{lineno}: needs a 'text' string.")
            key = str(obj.get("id", lineno - 1))
            by_id[key] = (obj["text"], obj.get("sensitive"))
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"{p} has no text for {len(missing)} embedding id(s) (first: {missing[0]!r}); "
            "texts are matched to embeddings by 'id'."
        )
    texts = [by_id[i][0] for i in ids]
    sens = [by_id[i][1] for i in ids]
    if all(s is None for s in sens):
        return texts, None
    if any(s is None for s in sens):
        raise ValueError(f"{p}: 'sensitive' is given for some texts but not all.")
    return texts, [{str(t).lower() for t in s} for s in sens]


def token_attack(
    X: Any,
    texts: Sequence[str],
    sensitive: Sequence[set[str]] | None = None,
    *,
    aux_fraction: float = 0.5,
    seed: int = 0,
    attack: Mapping[str, Any] | None = None,
) -> TokenLeakage:
    """The adaptive token attacker of a sweep: it owns ``aux_fraction`` of the records (texts
    and plain embeddings) and attacks the rest (:func:`attacker_split`)."""
    A = np.asarray(X)
    if len(texts) != A.shape[0]:
        raise DataError(f"{len(texts)} texts for {A.shape[0]} embeddings.")
    aux, tgt = attacker_split(len(texts), aux_fraction, seed)
    return TokenLeakage(
        texts=[texts[i] for i in tgt],
        sensitive=None if sensitive is None else [sensitive[i] for i in tgt],
        aux_texts=[texts[i] for i in aux],
        aux_embeddings=A[aux],
        rows=tgt.tolist(),
        attack=attack,
    )


def build_configs(
    mechanisms: Sequence[str],
    *,
    dim: int,
    X: Any = None,
    epsilon: Sequence[float] | None = None,
    delta: float = 1e-5,
    sigma: Sequence[float] | None = None,
    calibration: Sequence[str] = ("analytic",),
    k: Sequence[int] | None = None,
    profile: str | Path | None = None,
    smoothing: Sequence[float] | None = None,
    mask_delta: Sequence[float] | None = None,
    cosines: Sequence[float] = DEFAULT_COSINES,
    seed: int = 0,
) -> tuple[list[SweepConfig], list[str]]:
    """The sweep's configurations and notes for the report.

    ``epsilon`` (and ``sigma`` for ``empirical``) default to each mechanism's own theory grid:
    where its expected mean cosine is each of ``cosines`` for dimension ``dim``
    (:func:`~privembed.evaluation.advice.theory_grid`; measured on ``X`` for mechanisms
    without a closed form), so that every report shows the transition from noise to signal.
    """
    if isinstance(mechanisms, str) or not mechanisms:
        raise ValueError(f"mechanisms must be a non-empty list of names, got {mechanisms!r}.")
    from ..mechanisms import MECHANISMS

    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
        raise ValueError(f"mechanism must be one of {opts}, got mechanism={unknown[0]!r}.")
    notes: list[str] = []
    configs: list[SweepConfig] = []
    for name in mechanisms:
        extra: dict[str, Any] = {}
        if name == "gaussian" and list(calibration) != ["analytic"]:
            extra["calibration"] = list(calibration)
        if name == "projection":
            if not k:
                raise ValueError("--k is required with the projection mechanism (e.g. --k 64,128).")
            extra["k"] = [int(v) for v in k]
        if name == "mahalanobis":
            if profile is not None:
                if not Path(profile).exists():
                    raise FileNotFoundError(f"file not found: {profile}")
                extra["profile"] = str(profile)
            else:
                notes.append(
                    "mahalanobis was run without a concept profile (--profile): Sigma = I, so it "
                    "is the isotropic Laplace mechanism; learn a profile with 'privembed concept'."
                )
            if smoothing is not None:
                extra["smoothing"] = list(smoothing)
            if mask_delta is not None:
                extra["mask_delta"] = list(mask_delta)
        eps = epsilon
        sig = sigma
        theory_params = {
            p: v[0] for p, v in extra.items() if isinstance(v, list) and v and p != "calibration"
        }
        theory_params.update({p: v for p, v in extra.items() if isinstance(v, str)})
        cls = MECHANISMS[name]
        if cls.needs("delta"):
            theory_params["delta"] = delta
        if cls.privacy_parameter == "sigma" and sig is None:
            sig = theory_grid(name, dim, cosines=cosines, params=theory_params, X=X, seed=seed)
        elif cls.privacy_parameter == "epsilon" and eps is None:
            eps = theory_grid(name, dim, cosines=cosines, params=theory_params, X=X, seed=seed)
        configs += grid(
            [name],
            epsilon=eps if eps is not None else (1.0,),
            delta=delta,
            sigma=sig,
            params={name: extra} if extra else None,
        )
    if epsilon is None:
        notes.append(
            "ε grid from theory: per mechanism, the ε at which the expected mean cosine is "
            + ", ".join(f"{c:g}" for c in cosines)
            + f" for dimension {dim} (pass --epsilon to choose your own)."
        )
    keys = [c.key for c in configs]
    if len(set(keys)) != len(keys):
        raise ValueError("the grid has duplicate configurations.")
    return configs, notes


@dataclass
class Evaluation:
    """What :func:`evaluate_embeddings` produced."""

    result: SweepResult
    recommendation: Recommendation
    report: Path
    notes: list[str] = field(default_factory=list)
    #: the deployment recommendation (:func:`~privembed.evaluation.modes.advise_modes`, the one
    #: ``privembed advise`` makes for the same input), saved as ``advice.json`` beside the report
    deployment: Any = None


def evaluate_embeddings(
    X: Any,
    output: str | Path,
    *,
    mechanisms: Sequence[str] = ("gaussian", "laplace", "mahalanobis", "purkayastha"),
    epsilon: Sequence[float] | None = None,
    runs: int = 5,
    seed: int = 0,
    delta: float = 1e-5,
    sigma: Sequence[float] | None = None,
    calibration: Sequence[str] = ("analytic",),
    k: Sequence[int] | None = None,
    profile: str | Path | None = None,
    smoothing: Sequence[float] | None = None,
    mask_delta: Sequence[float] | None = None,
    floors: Sequence[Floor] = (),
    ceilings: Sequence[Floor] | None = None,
    reid_multiple: float = REID_CHANCE_MULTIPLE,
    linkage: bool = True,
    texts: Sequence[str] | None = None,
    sensitive: Sequence[set[str]] | None = None,
    aux_fraction: float = 0.5,
    attack: Mapping[str, Any] | None = None,
    n_queries: int | None = 2000,
    restart: bool = False,
    description: Mapping[str, Any] | None = None,
    title: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    retrieval: RetrievalTask | None = None,
    deployment: bool = True,
    model: str | None = None,
) -> Evaluation:
    """Sweep, recommend and report: what ``privembed evaluate`` does.

    Parameters
    ----------
    X : array_like, shape (n, d)
    output : path
        Report folder: ``index.html``, plots, ``results.csv`` / ``.parquet`` / ``.json``,
        ``runs.csv`` and the resumable ``runs.jsonl``.
    epsilon, sigma : sequence of float, optional
        Default: from theory (:func:`build_configs`).
    floors : sequence of Floor
        Utility floors (``>=``; never the re-identification rate) and extra ceilings (``<=``);
        without a utility floor the default floor applies
        (:data:`~privembed.evaluation.recommend.DEFAULT_UTILITY_FLOOR`).
    ceilings : sequence of Floor, optional
        Default: from the attacks that beat chance (reid@1 <= ``reid_multiple`` x chance, token
        leakage within the blind attacker's interval).
    texts, sensitive : optional
        Texts aligned with the rows of ``X`` (and their sensitive tokens): runs the adaptive
        token attack with ``attack`` settings (default
        :data:`~privembed.attacks.token_inference.AUDIT_SETTINGS`).
    retrieval : RetrievalTask, optional
        Real queries with relevance judgements over the rows of ``X`` (e.g. from
        :func:`embed_retrieval_task`): adds ``ndcg@10`` and recall columns of plain queries
        over each protected corpus.
    deployment : bool
        Also make the deployment recommendation of ``privembed advise`` for the same input
        (:func:`~privembed.evaluation.modes.advise_modes` with its defaults, the token attack
        when texts are given, ``model`` naming the embedding model): the report shows it, and
        it is saved as ``advice.json``.
    """
    A, _ = check_embeddings(X, name="X")
    A = np.asarray(A)
    out = Path(output)
    configs, notes = build_configs(
        mechanisms,
        dim=A.shape[1],
        X=A,
        epsilon=epsilon,
        delta=delta,
        sigma=sigma,
        calibration=calibration,
        k=k,
        profile=profile,
        smoothing=smoothing,
        mask_delta=mask_delta,
        seed=seed,
    )
    ev = _utility_evaluator(A, n_queries, retrieval)
    privacy, desc = _attacks_and_description(
        A, description, linkage, texts, sensitive, aux_fraction, seed, attack
    )
    out.mkdir(parents=True, exist_ok=True)
    result = run_sweep(
        A,
        configs,
        runs=runs,
        seed=seed,
        utility=ev,
        privacy=privacy,
        results=out / "runs.jsonl",
        restart=restart,
        on_progress=on_progress,
        description=desc,
    )
    advice = None
    if deployment and A.shape[0] < 12:
        notes.append(
            f"no deployment recommendation: advise needs at least 12 documents (a clean top 10), "
            f"got {A.shape[0]}."
        )
    elif deployment:
        from .modes import advise_modes

        attacks = (
            [token_attack(A, texts, sensitive, aux_fraction=aux_fraction, seed=seed, attack=attack)]
            if texts is not None
            else []
        )
        advice = advise_modes(A, attacks=attacks, seed=seed, model=model)
        advice.save(out / "advice.json")
    rec, page = _save_and_report(result, out, floors, ceilings, reid_multiple, title, notes, advice)
    return Evaluation(
        result=result, recommendation=rec, report=page, notes=notes, deployment=advice
    )


def _utility_evaluator(
    A: NDArray[Any], n_queries: int | None, retrieval: RetrievalTask | None
) -> UtilityEvaluator:
    """The sweep's utility metrics (``n_queries`` 0 or None: every row is a query)."""
    return UtilityEvaluator(
        A,
        n_queries=None if not n_queries else n_queries,
        neighbours=min(10, A.shape[0] - 1),
        retrieval=retrieval,
    )


def _attacks_and_description(
    A: NDArray[Any],
    description: Mapping[str, Any] | None,
    linkage: bool,
    texts: Sequence[str] | None,
    sensitive: Sequence[set[str]] | None,
    aux_fraction: float,
    seed: int,
    attack: Mapping[str, Any] | None,
) -> tuple[list[Any], dict[str, Any]]:
    """The sweep's attacks (linkage; the token attack when there are texts) and the data
    description stored with the results."""
    privacy: list[Any] = []
    if linkage:
        privacy.append(Linkage())
    desc: dict[str, Any] = dict(description or {})
    if texts is not None:
        tok = token_attack(A, texts, sensitive, aux_fraction=aux_fraction, seed=seed, attack=attack)
        privacy.append(tok)
        desc["texts"] = (
            f"token attacker owns {len(tok.aux_texts)} records, targets {len(tok.texts)}; "
            f"attack settings {tok.attack_kwargs}"
        )
    desc.update(describe_embeddings(A))
    return privacy, desc


def _save_and_report(
    result: SweepResult,
    out: Path,
    floors: Sequence[Floor],
    ceilings: Sequence[Floor] | None,
    reid_multiple: float,
    title: str | None,
    notes: list[str],
    deployment: Any = None,
) -> tuple[Recommendation, Path]:
    """Save the tables, recommend for the floors and ceilings, and write the report."""
    result.save(out)
    rec = recommend(
        result, floors, ceilings=ceilings, reid_multiple=reid_multiple, default_floor=True
    )
    from .report import write_report

    page = write_report(
        result,
        out,
        recommendation=rec,
        title=title or "privembed evaluation",
        notes=notes,
        deployment=deployment,
    )
    return rec, page


def embed_retrieval_task(
    task: Any,
    embedder: Any = None,
    *,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[NDArray[np.float32], list[str], RetrievalTask]:
    """Embed a retrieval task (:class:`~privembed.evaluation.loaders.MTEBRetrieval`, e.g.
    :func:`~privembed.evaluation.loaders.gcide_retrieval`) for :func:`evaluate_embeddings`.

    Returns the corpus embeddings (the rows to protect), their ids, and the
    :class:`RetrievalTask` of the queries (plain: the question is what protecting the stored
    vectors costs a user who searches them with clean queries). ``on_progress(texts_done)``
    counts the corpus, then the queries.
    """
    if embedder is None:
        from ..data.embedders import Embedder

        embedder = Embedder()
    done = {"docs": 0}

    def docs_progress(rows: int) -> None:
        done["docs"] = rows
        if on_progress is not None:
            on_progress(rows)

    def query_progress(rows: int) -> None:
        if on_progress is not None:
            on_progress(done["docs"] + rows)

    import inspect

    reports = "on_progress" in inspect.signature(embedder.encode).parameters

    def encode(texts: list[str], cb: Callable[[int], None]) -> NDArray[np.float32]:
        out = embedder.encode(texts, on_progress=cb) if reports else embedder.encode(texts)
        return np.asarray(out, dtype=np.float32)

    D = encode(list(task.doc_texts), docs_progress)
    Q = encode(list(task.query_texts), query_progress)
    rt = RetrievalTask(
        queries=Q,
        query_ids=list(task.query_ids),
        doc_ids=list(task.doc_ids),
        qrels=task.qrels,
        name=task.name,
    )
    return D, list(task.doc_ids), rt
