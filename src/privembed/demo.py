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
from .mechanisms import build_mechanism, get_mechanism

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
    """advise -> index -> search, on the embeddings ``X``: the recommendation ``privembed
    advise`` makes for them (same call, same defaults), indexed and searched for real.

    Returns a dict: the advice sentence, every mode's line, the recommended mode and its threat
    lines; for the sealed mode the recall of the clean top 10 by the sealed search (every payload
    fetched, exact); for the best noise setting (the recommendation itself, or what it becomes
    past the sealed budget) its mechanism, epsilon and k', the recall by plain search of the
    protected store (k = 10) and by the re-ranked search (k' candidates, exact re-rank) and the
    measured re-identification rate with its blind baseline; ``indexed``: what was indexed and
    found, in one paragraph. Queries are advise's pseudo-queries (documents diluted with noise,
    :func:`~privembed.evaluation.modes.advice_queries`).
    ``key`` is the collection's noise and payload key (default: a fresh one, kept in memory):
    the index is a fresh noise draw, not one that advise measured, so its recall varies around
    advise's by a draw's spread (advise's floor holds on each of 3 draws at the lower end of a
    95% interval, so a fresh draw meets it in most cases, not in every one).
    """
    import os
    import tempfile

    from .evaluation.modes import advice_queries, advise_modes
    from .integrations.collection import ProtectedCollection

    say = on_step or (lambda _msg: None)
    n = X.shape[0]
    say("advise: the deployment, per mode, within the cost budget (as 'privembed advise')")
    adv = advise_modes(X, min_recall=min_recall, max_depth=max_depth, seed=seed, model=model)
    Q = advice_queries(X, seed=seed)  # the pseudo-queries advise measured with
    out: dict[str, Any] = {
        "advice": adv.sentence(),
        "recommended": None,
        "modes": [adv.setting_line(s) for s in adv.settings],
        "threat_lines": [x for x in adv.threat_lines() if not x.startswith("  (holds")],
    }
    r = adv.recommended
    if r is None:
        return out
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    top = np.argsort(-(Qn @ Xn.T), axis=1)[:, :10]
    key = key or os.urandom(32)
    ids = [str(i) for i in range(n)]
    out.update(recommended=r.mode, threats=[v.text() for v in r.verdicts])
    with tempfile.TemporaryDirectory() as tmp:
        if r.mode == "sealed":
            say("index sealed (FAISS): no vector in the store; search fetches every payload")
            with ProtectedCollection.open("faiss", tmp, "sealed", mechanism="sealed",
                                          key=key) as col:  # fmt: skip
                col.add(ids, X)
                hits = col.query(Q, k=10)
            assert r.cost is not None
            out.update(
                recall_sealed_search=_recall(hits, top),
                sync_bytes=r.cost.sync_bytes,
                indexed=(
                    f"Indexed sealed in FAISS: {n:,} AES-GCM payloads and no vector; the client "
                    f"fetched all {r.cost.sync_bytes:,} bytes once and ranked exactly: recall of "
                    f"the clean top 10 {_recall(hits, top):.3f}."
                ),
            )
        noise = adv.recommended_noise
        if noise is not None and noise.epsilon is not None and noise.mode in ("plain", "rerank"):
            out.update(_noise_index(noise, X, Q, top, ids, key, tmp, say))
            if r.mode == "sealed":  # what the recommendation becomes for a larger corpus
                out["indexed"] += (
                    f" Past the sealed budget, the best noise setting is {noise.label} epsilon "
                    f"{noise.epsilon:.4g}: {out.pop('noise_line')}"
                )
                out["noise_threats"] = [v.text() for v in noise.verdicts]
            else:
                line = out.pop("noise_line")
                out["indexed"] = line[0].upper() + line[1:]
    out.setdefault("indexed", "")
    return out


def _noise_index(
    s: Any, X: Any, Q: Any, top: Any, ids: list[str], key: bytes, tmp: str,
    say: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    """Index at a noise setting with sealed payloads (FAISS), search plain and re-ranked."""
    from .integrations.collection import ProtectedCollection

    mech = build_mechanism(**s.config)  # the very setting advise measured
    say(f"index at {s.mechanism} epsilon {s.epsilon:.4g} with sealed payloads (FAISS)")
    with ProtectedCollection.open("faiss", tmp, "noise", mechanism=mech, key=key,
                                  payloads=True) as col:  # fmt: skip
        col.add(ids, X)
        say(f"search: plain top 10, and re-ranked from k' = {s.depth}")
        plain = col.query(Q, k=10)
        reranked = col.query(Q, k=10, rerank=s.depth)
    link = next((e for e in s.evidence if e.attack == "linkage"), None)
    rp, rr = _recall(plain, top), _recall(reranked, top)
    return {
        "mechanism": s.mechanism,
        "epsilon": s.epsilon,
        "k_prime": s.depth,
        "guarantee": s.guarantee_short,
        "payload_bytes_per_query": s.payload_bytes_per_query,
        "recall_plain_search": rp,
        "recall_reranked_search": rr,
        "reid_at_1": None if link is None else link.value,
        "reid_blind": None if link is None else link.blind,
        "noise_line": (
            f"indexed at {s.mechanism} epsilon {s.epsilon:.4g} in FAISS with sealed payloads; "
            f"recall of the clean top 10: plain search {rp:.3f}, re-ranked from k' = {s.depth} "
            f"{rr:.3f} ({s.payload_bytes_per_query:,} payload bytes per query)."
        ),
    }
