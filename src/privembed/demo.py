"""The main job on a bundled default: synthetic clinical notes -> embeddings -> protection -> summary.

``privembed demo`` runs :func:`run_demo`: it generates seeded synthetic clinical notes, embeds
them with the offline all-MiniLM-L6-v2 model, protects them with several mechanisms and
privacy levels, and reports for each the formal guarantee, the mean cosine to the originals and
the top-1 retrieval of each protected vector among the originals -- which is also the success
rate of a re-identification (linkage) attack that holds the original embeddings.

Then it shows the path that works (:func:`working_path`): ``advise`` picks the deployment mode
and the smallest epsilon at which search stays useful (exact re-ranking of k' candidates from
sealed payloads), the notes are protected and indexed at that setting in a FAISS collection with
payloads under a fresh in-memory key, searched with ``rerank=k'``, and the recall of the clean
top 10 is measured on that search -- with the attack results and the threats the setting does
and does not defend against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .core.rng import spawn
from .data.datasets import synthetic_clinical_notes
from .data.embedders import Embedder
from .evaluation.metrics import mean_cosine, self_retrieval
from .mechanisms import get_mechanism

__all__ = ["DEFAULT_CONFIGS", "DemoRow", "run_demo", "working_path"]

#: (mechanism name, parameters) protected in the demo
DEFAULT_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("gaussian", {"epsilon": 5.0, "delta": 1e-5}),
    ("gaussian", {"epsilon": 50.0, "delta": 1e-5}),
    ("gaussian", {"epsilon": 50.0, "delta": 1e-5, "calibration": "classic"}),
    ("empirical", {"sigma": 0.2}),
    ("laplace", {"epsilon": 50.0}),
    ("laplace", {"epsilon": 500.0}),
    ("purkayastha", {"epsilon": 50.0}),
    ("purkayastha", {"epsilon": 500.0}),
)


@dataclass(frozen=True)
class DemoRow:
    """One protected configuration and what it costs and buys."""

    label: str
    guarantee: str
    mean_cosine: float
    top1: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.label,
            "guarantee": self.guarantee,
            "mean_cosine": self.mean_cosine,
            "top1_retrieval": self.top1,
        }


def run_demo(
    *,
    n: int = 300,
    seed: int = 0,
    model: str | None = None,
    configs: tuple[tuple[str, dict[str, Any]], ...] = DEFAULT_CONFIGS,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the demo; returns ``{"n", "dim", "model", "rows": [DemoRow, ...], "baseline": ...}``."""
    say = on_step or (lambda _msg: None)
    say(f"generating {n} synthetic clinical notes (seed {seed})")
    notes = synthetic_clinical_notes(n, seed=seed)
    say("embedding with the offline model")
    emb = Embedder(model)
    X = emb.encode([note.text for note in notes])
    rows = []
    warnings: list[str] = []
    streams = spawn(seed, len(configs))
    for (name, params), g in zip(configs, streams, strict=True):
        mech = get_mechanism(name, **params)
        say(f"protecting with {mech!r}")
        Y = mech.privatize(X, rng=g)
        label = (
            name
            + "("
            + ", ".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
            )
            + ")"
        )
        requested = mech.params.get("delta")
        achieved = getattr(mech.guarantee, "delta", None)
        if requested is not None and achieved is not None and achieved > requested:
            warnings.append(
                f"{label}: the classic sigma under-noises; the exact delta at epsilon="
                f"{mech.params['epsilon']:g} is {achieved:.3g}, not {requested:g} ([K26] "
                "reports it as the requested guarantee)."
            )
        rows.append(DemoRow(label, mech.guarantee.short(), mean_cosine(X, Y), self_retrieval(Y, X)))
    path = working_path(np.asarray(X), seed=seed, model=emb.name, on_step=say)
    # what an attacker gets without protection: a nearest-neighbour baseline between notes
    S = X @ X.T
    np.fill_diagonal(S, -np.inf)
    return {
        "n": n,
        "dim": int(X.shape[1]),
        "model": emb.name,
        "nearest_other_note_cosine": float(S.max(axis=1).mean()),
        "rows": rows,
        "warnings": warnings,
        "example": notes[0].text,
        "path": path,
    }


def _recall(hits: Any, top: Any) -> float:
    return float(
        np.mean(
            [
                len({str(j) for j in t} & {h.id for h in hs}) / len(t)
                for t, hs in zip(top, hits, strict=True)
            ]
        )
    )


def working_path(
    X: Any,
    *,
    seed: int = 0,
    min_recall: float = 0.9,
    max_depth: int | None = None,
    key: bytes | None = None,
    model: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """advise -> protect -> index with payloads -> search with re-rank, on the embeddings ``X``.

    Returns a dict: the advice sentence, the recommended mode, mechanism, epsilon and k', the
    guarantee, the recall of the clean top 10 by plain search of the protected store (k = 10)
    and by the re-ranked search (k' candidates, exact re-rank), the measured re-identification
    rate at that setting with its blind baseline, and one line per threat model. Queries are
    pseudo-queries (documents diluted with noise, :func:`privembed.search.rerank.pseudo_queries`).
    ``key`` is the collection's noise and payload key (default: a fresh one, kept in memory):
    the index is a fresh noise draw, not one that advise measured, so its recall varies around
    advise's by a draw's spread (advise's floor holds on each of 3 draws at the lower end of a
    95% interval, so a fresh draw meets it in most cases, not in every one).
    """
    import os
    import tempfile

    from .evaluation.modes import advise_modes
    from .integrations.collection import ProtectedCollection
    from .search.rerank import pseudo_queries

    say = on_step or (lambda _msg: None)
    g_pick, g_q = spawn(seed, 2)
    n = X.shape[0]
    pick = np.sort(g_pick.choice(n, min(100, n), replace=False))
    Q = pseudo_queries(X[pick], rng=g_q)
    say("advise: the smallest epsilon at which search stays useful, per mode")
    adv = advise_modes(X, queries=Q, modes=("plain", "rerank", "query"),
                       mechanisms=("laplace",), min_recall=min_recall, max_depth=max_depth,
                       seed=seed, model=model)  # fmt: skip
    out: dict[str, Any] = {"advice": adv.sentence(), "recommended": None}
    r = adv.recommended
    if r is None or r.epsilon is None:
        return out
    mech = get_mechanism(r.mechanism, epsilon=r.epsilon)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    top = np.argsort(-(Qn @ Xn.T), axis=1)[:, :10]
    say(f"index at {r.mechanism} epsilon {r.epsilon:.4g} with sealed payloads (FAISS)")
    with tempfile.TemporaryDirectory() as tmp:
        with ProtectedCollection.open("faiss", tmp, "demo", mechanism=mech,
                                      key=key or os.urandom(32), payloads=True) as col:  # fmt: skip
            col.add([str(i) for i in range(n)], X)
            say(f"search: plain top 10, and re-ranked from k' = {r.depth}")
            plain = col.query(Q, k=10)
            reranked = col.query(Q, k=10, rerank=r.depth)
    link = next((e for e in r.evidence if e.attack == "linkage"), None)
    out.update(
        recommended=r.mode,
        mechanism=r.mechanism,
        epsilon=r.epsilon,
        k_prime=r.depth,
        guarantee=r.guarantee_short,
        payload_bytes_per_query=r.payload_bytes_per_query,
        recall_plain_search=_recall(plain, top),
        recall_reranked_search=_recall(reranked, top),
        reid_at_1=None if link is None else link.value,
        reid_blind=None if link is None else link.blind,
        threats=[v.text() for v in r.verdicts],
        threat_lines=[x for x in adv.threat_lines() if not x.startswith("  (holds")],
        modes=[adv.setting_line(s) for s in adv.settings],
    )
    return out
