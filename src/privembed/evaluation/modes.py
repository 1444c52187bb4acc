r"""Advice per deployment mode: the smallest epsilon at which *search* stays useful, what it
costs per query, and which threats that setting defends against.

Judging plain protected vectors only (issue 26) misses the deployment that works: fetch k'
candidates by protected similarity, open their sealed payloads inside the trust boundary and
re-rank them exactly -- or, when the corpus is small enough for the budget, keep no vector in
the store at all. This module measures five modes on the user's own embeddings, in memory (no
store is built):

* ``sealed`` -- the store holds AES-GCM payloads only; the client fetches all of them and
  ranks exactly (no epsilon: encryption, not noise; recommended whenever the cost of fetching
  every payload fits the budget);
* ``plain`` -- protected vectors searched directly (k' = k = 10, no payloads);
* ``rerank`` -- top-k' by protected similarity, then exact re-rank with the clean vectors of
  the sealed payloads;
* ``subspace+rerank`` -- :class:`~privembed.mechanisms.SubspaceMechanism` (noise in k
  dimensions; basis from public embeddings, or DP-PCA of the data charged to every record),
  then exact re-rank;
* ``query`` -- clean documents, protected queries (RemoteRAG pattern): protects *queries only*;
  the store holds the documents in the clear.

**Utility** is the recall of each query's clean top 10 within the k' fetched (after exact
re-ranking, the share of the clean top 10 in the final top 10); a mode meets the floor at
depth k' when, on each of ``draws`` (default 3) independent noise draws, the lower end of the
95% interval of the mean over queries is at or above it (so that a fresh draw -- the one a
real index makes -- is likely to meet it too: the queries share the documents' noise, so one
draw's interval over queries understates the spread between draws). For ``plain`` with ``min_cosine`` the
floor is on the mean cosine to the original instead.

**The search** per (mode, mechanism): a log grid of epsilon (8 points a decade), the same
``draws`` seeds at every probe (utility is then as monotone in epsilon as the law allows), the
top of the grid first (none meets: stop, report the nearest point), then bisection on the grid
indices -- about 6 probes; the clean similarities and clean top-10 sets are computed once and
shared by every probe.

**Attacks** at the chosen epsilon: linkage (re-identification among candidate originals, with
the blind baseline 1/candidates and the Wilson interval) and, for the subspace mode, the same
attack by a holder of the basis. Their verdicts come from :mod:`privembed.evaluation.threats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.rng import spawn
from ..mechanisms import Mechanism, build_mechanism
from .advice import implied_ldp
from .cost import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_SYNC_BYTES,
    Budget,
    QueryCost,
    Rates,
    query_cost,
    sealed_cost,
)
from .threats import (
    DOES_NOT_DEFEND,
    THREATS,
    AttackEvidence,
    ThreatVerdict,
    judge,
    judge_sealed,
    judge_structural,
    threats_for,
)

__all__ = [
    "MODES",
    "ModeSetting",
    "ModesAdvice",
    "QueryData",
    "advise_modes",
]

#: the deployment modes, in the order they are tried
MODES = ("sealed", "plain", "rerank", "subspace+rerank", "query")
#: modes whose store holds protected documents (the others protect queries only)
DOCUMENT_MODES = ("sealed", "plain", "rerank", "subspace+rerank")
#: the epsilon grid: 8 points a decade from 1 to 1e5
GRID = tuple(float(10 ** (j / 8)) for j in range(41))
#: the noise laws tried in every mode (the subspace mode has the same three)
LAWS = ("laplace", "gaussian", "purkayastha")
#: k' is at most 1/DEPTH_SHARE of the corpus: fetching more is close to fetching all of it
DEPTH_SHARE = 4
#: the size of the clean top set whose recall is the utility
TOP_K = 10
#: the tag of a saved recommendation (:meth:`ModesAdvice.save`)
ADVICE_FORMAT = "privembed/advice/v1"
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class QueryData:
    """The queries utility is measured on, and where they come from.

    Attributes
    ----------
    Q : ndarray (nq, d)
        Unit query vectors.
    source : str
        ``"queries"`` (given by the user) or ``"pseudo-queries"`` (documents diluted with
        :func:`privembed.search.rerank.pseudo_queries`: no real queries were given).
    """

    Q: NDArray[np.float64]
    source: str


@dataclass
class ModeSetting:
    """The answer for one (mode, mechanism): the smallest epsilon meeting the floor, or the
    nearest point when none does, with its cost and the threat verdicts there."""

    mode: str
    mechanism: str
    epsilon: float | None
    meets_floor: bool
    utility: float
    utility_low: float
    metric: str
    depth: int
    probes: int
    config: dict[str, Any] = field(default_factory=dict)
    guarantee: str = ""
    guarantee_short: str = ""
    ldp_epsilon: float | None = None
    ldp_delta: float | None = None
    subspace_k: int | None = None
    payload_bytes_per_query: int = 0
    decryptions_per_query: int = 0
    evidence: list[AttackEvidence] = field(default_factory=list)
    verdicts: list[ThreatVerdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    at_grid_bottom: bool = False
    cost: QueryCost | None = None
    depth_cap: int = 0

    @property
    def label(self) -> str:
        return f"{self.mode} / {self.mechanism}"

    def reid(self) -> float | None:
        """The measured top-1 re-identification rate by a candidate holder (None: not run)."""
        for e in self.evidence:
            if e.attack in ("linkage", "linkage_basis"):
                return e.value
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "meets_floor": self.meets_floor,
            "metric": self.metric,
            "utility": self.utility,
            "utility_low": self.utility_low,
            "depth": self.depth,
            "probes": self.probes,
            "config": self.config,
            "guarantee": self.guarantee,
            "guarantee_short": self.guarantee_short,
            "ldp_epsilon": self.ldp_epsilon,
            "ldp_delta": self.ldp_delta,
            "subspace_k": self.subspace_k,
            "payload_bytes_per_query": self.payload_bytes_per_query,
            "decryptions_per_query": self.decryptions_per_query,
            "evidence": [e.to_dict() for e in self.evidence],
            "verdicts": [v.to_dict() for v in self.verdicts],
            "notes": list(self.notes),
            "at_grid_bottom": self.at_grid_bottom,
            "cost_per_query": None if self.cost is None else self.cost.to_dict(),
            "depth_cap": self.depth_cap,
        }


@dataclass(frozen=True)
class DepthPrediction:
    """k' and bytes per query predicted for a larger corpus from this one (issue 38: the cost
    law). At a fixed epsilon the documents that outscore a true neighbour after noise grow with
    the corpus, so k' for the same recall grows as ``n ** exponent``: measured here at n/4, n/2
    and n (random subsets, the same queries and noise seeds), fitted, and extrapolated.

    The range: from the smaller half-step exponent up to linear growth (what a corpus that
    grows with content unlike its own gives; related content grows k' more slowly, measured
    n^0.55-0.76 here and n^0.75 on dictionary text), widened by ``spread``, the relative range
    of k' at n over independent noise draws (measured: k' is itself a random quantity of the
    index's draw). A statement of what the law and the draws allow, not a bound."""

    mode: str
    mechanism: str
    epsilon: float
    sizes: tuple[int, ...]
    depths: tuple[int, ...]
    exponent: float
    exponent_range: tuple[float, float]
    target_n: int
    depth: int
    low: int
    high: int
    bytes_per_query: int
    spread: float = 0.0
    #: bytes per query at ``low`` and ``high`` (the cost model is increasing in k': the
    #: stated range of the bytes is that of k')
    bytes_low: int = 0
    bytes_high: int = 0

    def text(self) -> str:
        pts = ", ".join(f"{d:,} at n = {m:,}" for m, d in zip(self.sizes, self.depths, strict=True))
        lo, hi = self.exponent_range
        return (
            f"At n = {self.target_n:,}: {self.mode} / {self.mechanism} epsilon "
            f"{self.epsilon:.4g} needs k' ~ {self.depth:,} (range {self.low:,}-{self.high:,}), "
            f"about {self.bytes_per_query / 1e6:.2f} MB per query (range "
            f"{self.bytes_low / 1e6:.2f}-{self.bytes_high / 1e6:.2f}): k' grows as n^"
            f"{self.exponent:.2f} (half-steps {lo:.2f}-{hi:.2f}; measured k' {pts}); the range "
            f"runs from the smaller exponent to linear growth, +-{100 * self.spread:.0f}% for "
            "the draw-to-draw spread of k'."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "mechanism": self.mechanism, "epsilon": self.epsilon,
            "sizes": list(self.sizes), "depths": list(self.depths), "exponent": self.exponent,
            "exponent_range": list(self.exponent_range), "target_n": self.target_n,
            "depth": self.depth, "low": self.low, "high": self.high,
            "bytes_per_query": self.bytes_per_query, "spread": self.spread,
            "bytes_low": self.bytes_low, "bytes_high": self.bytes_high,
        }  # fmt: skip


@dataclass
class ModesAdvice:
    """What :func:`advise_modes` found: one :class:`ModeSetting` per (mode, mechanism)."""

    floor: float
    min_cosine: float | None
    budget: Budget
    queries: str
    n: int
    d: int
    settings: list[ModeSetting]
    max_ldp_epsilon: float | None = None
    seed: int = 0
    model: str | None = None
    #: k' and bytes at the user's production size (``production_size``), for the best noise
    #: setting; None when not asked for or not measurable
    prediction: DepthPrediction | None = None

    def _allowed(self, s: ModeSetting) -> bool:
        if not s.meets_floor or s.mode not in DOCUMENT_MODES:
            return False
        if self.max_ldp_epsilon is None or s.mode == "sealed":
            return True
        return s.ldp_epsilon is not None and s.ldp_epsilon <= self.max_ldp_epsilon

    @staticmethod
    def _rank(s: ModeSetting) -> tuple[bool, float, int, float]:
        """Sealed first, then the smallest per-record LDP epsilon, the fewest decryptions and
        the fewest bytes per query."""
        return (
            s.mode != "sealed",
            math.inf if s.ldp_epsilon is None else s.ldp_epsilon,
            s.decryptions_per_query,
            math.inf if s.cost is None else s.cost.bytes,
        )

    @property
    def recommended_noise(self) -> ModeSetting | None:
        """The best setting that protects the documents with noise (not sealed): what the
        recommendation becomes when the corpus outgrows the sealed mode's budget."""
        ok = [s for s in self.settings if self._allowed(s) and s.mode != "sealed"]
        return min(ok, key=self._rank) if ok else None

    @property
    def recommended(self) -> ModeSetting | None:
        """The sealed mode when its cost fits the budget, else the document-protecting setting
        meeting the floor with the smallest per-record LDP epsilon (then the fewest decryptions
        per query); None if none does."""
        ok = [s for s in self.settings if self._allowed(s)]
        return min(ok, key=self._rank) if ok else None

    def floor_text(self) -> str:
        out = (
            f"recall of the clean top {TOP_K} >= {self.floor:g} within a cost budget of "
            f"{self.budget.text()} (k' <= 1/{DEPTH_SHARE} of the corpus)"
        )
        if self.min_cosine is not None:
            out += f" (plain: mean cosine to the original >= {self.min_cosine:g})"
        return out

    def sentence(self) -> str:
        """The recommendation in one sentence, or that no mode meets the floor."""
        r = self.recommended
        cap = (
            ""
            if self.max_ldp_epsilon is None
            else f" with per-record LDP epsilon <= {self.max_ldp_epsilon:g}"
        )
        if r is None:
            return (
                f"No setting meets {self.floor_text()}{cap} in any mode tried "
                f"({', '.join(sorted({s.mode for s in self.settings}))}); the nearest points "
                "are in the table."
            )
        if r.mode == "sealed":
            assert r.cost is not None
            c = r.cost
            fetch = (
                f"a one-time fetch of {c.sync_bytes / 1e6:.2f} MB per client session, then a "
                f"local exact scan per query (~{c.ms:.0f} ms)"
                if c.sync_bytes
                else f"every payload fetched on every query ({c.text()})"
            )
            return (
                f"Recommended: mode sealed -- no vector in the store, only the {self.n:,} "
                f"records' AES-GCM payloads, which the client fetches and ranks exactly "
                f"(recall 1): {fetch}; within the budget ({self.budget.text()})."
            )
        extra = f", k = {r.subspace_k}" if r.subspace_k is not None else ""
        return (
            f"Recommended: mode {r.mode}, {r.mechanism} epsilon = {r.epsilon:.4g}{extra}, "
            f"k' = {r.depth} ({r.guarantee_short}); it meets {self.floor_text()}{cap} "
            f"(measured {r.utility:.3f}, 95% lower end {r.utility_low:.3f})."
        )

    def attack_lines(self) -> list[str]:
        """For the recommended setting: every attack run and how strong it was on unprotected
        vectors (only an attack that beats blind there by the margin is evidence)."""
        r = self.recommended
        if r is None or not r.evidence:
            return []
        margin = min(t.margin for t in THREATS.values() if t.defended_by == "epsilon")
        return [
            f"Attacks run at the recommended setting ({len(r.evidence)}):",
            *(f"- {e.strength_text(margin)}" for e in r.evidence),
        ]

    def threat_lines(self) -> list[str]:
        """For the recommended setting: each threat model, what the attacker holds, and the
        verdict -- plainly, including what no setting that keeps search useful prevents."""
        r = self.recommended
        if r is None:
            return []
        at = "no epsilon: encryption" if r.epsilon is None else f"epsilon {r.epsilon:.4g}"
        out = [f"Threat models at the recommended setting ({r.label}, {at}):"]
        if r.mode == "sealed" and r.verdicts:  # one reason for all: say it once
            out.append(f"  {r.verdicts[0].reason[0].upper()}{r.verdicts[0].reason[1:]}.")
            out += [f"- against {v.threat.title}: {v.verdict}" for v in r.verdicts]
            return out
        for v in r.verdicts:
            out.append(f"- {v.text()}")
            out.append(f"  (holds {v.threat.holds})")
        reid = r.reid()
        cand = [v for v in r.verdicts if v.threat.name == "candidate_holder"]
        if reid is not None and cand and cand[0].verdict == DOES_NOT_DEFEND:
            out.append(
                "Against a candidate holder, no setting that keeps search useful prevents "
                f"re-identification: measured reid@1 = {reid:.3f} at this setting."
            )
        elif reid is not None:
            out.append(f"Measured reid@1 by a candidate holder at this setting: {reid:.3f}.")
        return out

    def setting_line(self, s: ModeSetting) -> str:
        """One line per (mode, mechanism): the point, its utility, guarantee, cost and reid."""
        if s.mode == "sealed":
            cost = "" if s.cost is None else f"; cost per query: {s.cost.text()}"
            fits = "fits the budget" if s.meets_floor else "over the budget"
            return (
                f"{s.label}: {fits}: no vector in the store, every payload fetched and ranked "
                f"exactly on the client (recall 1){cost}"
            )
        what = "smallest meeting the floor" if s.meets_floor else "none meets; nearest"
        if s.meets_floor and s.at_grid_bottom:
            what = "meets at the grid's smallest epsilon (a smaller one may too)"
        if s.utility != s.utility:  # nan: not available
            return f"{s.label}: {'; '.join(s.notes)}"
        eps = s.epsilon if s.epsilon is not None else s.config.get("epsilon", math.nan)
        sub = f", k = {s.subspace_k}" if s.subspace_k is not None else ""
        util = "mean cosine" if s.metric == "mean_cosine" else "recall"
        parts = [
            f"{s.label}: {what}: epsilon {float(eps):.4g}{sub}, k' {s.depth}",
            f"{util} {s.utility:.3f} (95% lower end {s.utility_low:.3f})",
            s.guarantee_short,
        ]
        if s.cost is not None:
            parts.append(f"cost per query: {s.cost.text()} (k' <= {s.depth_cap} fits the budget)")
        reid = s.reid()
        if reid is not None and s.evidence:
            parts.append(f"reid@1 {reid:.3f} (blind {s.evidence[0].blind:.3f})")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """What ``privembed advise`` prints: the floor, every setting, the recommendation and
        the threat verdicts."""
        src = (
            "real queries"
            if self.queries == "queries"
            else "documents standing in for queries (pseudo-queries; give --queries for real ones)"
        )
        out = [
            f"Utility floor: {self.floor_text()}; measured on {src}; {self.n} documents, "
            f"d = {self.d}.",
        ]
        for s in self.settings:
            out.append(f"- {self.setting_line(s)}")
            if s.utility == s.utility:  # the notes of an unavailable row are its line
                out += [f"  note: {n}" for n in s.notes if not n.startswith("protects queries")]
        out.append(self.sentence())
        if self.prediction is not None:
            out.append(self.prediction.text())
        out += self.attack_lines()
        out += self.threat_lines()
        if any(s.mode == "query" for s in self.settings):
            out.append(
                "Mode query protects queries only: the store holds the documents in the clear "
                "(use it for public documents)."
            )
        rec = self.recommended
        if (rec is None or rec.mode != "sealed") and not any(
            e.attack == "token_inference" for r in self.settings for e in r.evidence
        ):
            out.append(
                "No token inference attack was run (give --texts): the threats 'store-only "
                "attacker' and 'attacker with public text' read 'not measured'."
            )
        return out

    def save(self, path: Any) -> Path:
        """Write :meth:`to_dict` as JSON (atomically): the one recommendation that ``advise
        --save``, ``evaluate`` (``advice.json`` beside its report) and the demo write, and that
        ``serve --init --from-advice`` reads (:func:`load_advice`)."""
        import json

        from ..data.io import atomic_output

        out = Path(path)
        with atomic_output(out) as tmp:
            Path(tmp).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return out

    def to_dict(self) -> dict[str, Any]:
        r = self.recommended
        return {
            "format": ADVICE_FORMAT,
            "answer": self.sentence(),
            "floor": {
                "metric": "recall",
                "value": self.floor,
                "plain_min_cosine": self.min_cosine,
            },
            "budget": self.budget.to_dict(),
            "queries": self.queries,
            "n": self.n,
            "d": self.d,
            "seed": self.seed,
            "max_ldp_epsilon": self.max_ldp_epsilon,
            "recommended": None
            if r is None
            else {
                "mode": r.mode,
                "mechanism": r.mechanism,
                "epsilon": r.epsilon,
                "depth": r.depth,
                "config": r.config,
                "subspace_k": r.subspace_k,
            },
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "threat_models": {k: t.to_dict() for k, t in THREATS.items()},
            "settings": [s.to_dict() for s in self.settings],
        }


# ---------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------


def _unit(A: Any) -> NDArray[np.float64]:
    A = np.asarray(A, dtype=np.float64)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


class _Clean:
    """What every probe shares: unit documents and queries, clean scores and the clean top k."""

    def __init__(self, D: NDArray[np.float64], Q: NDArray[np.float64]) -> None:
        self.D = D
        self.Q = Q
        S = Q @ D.T
        self.k = min(TOP_K, D.shape[0] - 1)
        self.top = np.argpartition(-S, self.k - 1, axis=1)[:, : self.k]


def _ranks(clean: _Clean, P: NDArray[np.float64]) -> NDArray[np.int64]:
    """1-based rank by protected score P (nq, n) of each query's clean top k (ties against)."""
    own = np.take_along_axis(P, clean.top, axis=1)
    R = np.empty(own.shape, dtype=np.int64)
    step = max(1, (1 << 24) // max(1, P.shape[1] * own.shape[1]))  # ~16M comparisons a block
    for s in range(0, P.shape[0], step):  # documents scoring >= each own score, itself included
        blk = P[s : s + step]
        R[s : s + step] = (blk[:, None, :] >= own[s : s + step, :, None]).sum(axis=2)
    return R


def _recall_curve(
    R: NDArray[np.int64], depths: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean recall per depth and the lower end of its 95% interval over queries."""
    per = (R[:, :, None] <= depths[None, None, :]).mean(axis=1)  # (nq, nd)
    mean = per.mean(axis=0)
    se = per.std(axis=0, ddof=1) / math.sqrt(per.shape[0]) if per.shape[0] > 1 else mean * 0
    return mean, mean - _Z95 * se


@dataclass
class _Probe:
    ok: bool
    utility: float
    low: float
    depth: int
    mech: Mechanism
    Y: NDArray[np.float64]


class _ModeRunner:
    """Builds a mode's mechanism at an epsilon and measures ``draws`` noise draws."""

    def __init__(
        self,
        mode: str,
        name: str,
        params: Mapping[str, Any],
        clean: _Clean,
        *,
        floor: float,
        metric: str,
        max_depth: int,
        seed: int,
        basis: Any,
        draws: int = 1,
    ) -> None:
        self.mode, self.name, self.params = mode, name, dict(params)
        self.clean, self.floor, self.metric = clean, floor, metric
        self.max_depth, self.seed, self.basis = max_depth, seed, basis
        n = clean.D.shape[0]
        hi = clean.k if mode == "plain" else min(max_depth, n)
        self.depths = np.arange(clean.k, max(hi, clean.k) + 1, dtype=np.int64)
        self.error = ""
        self.seeds = [seed + 7919 * j for j in range(draws)]

    def build(self, eps: float) -> Mechanism:
        if self.mode == "subspace+rerank":
            from ..mechanisms.subspace import SubspaceMechanism

            return SubspaceMechanism(basis=self.basis, epsilon=eps, noise=self.name, **self.params)
        return build_mechanism(self.name, epsilon=eps, **self.params)

    def probe(self, eps: float) -> _Probe | None:
        try:
            m = self.build(eps)
        except ValueError as e:  # e.g. a subspace too small for the law at this epsilon
            self.error = str(e)
            return None
        c = self.clean
        means, lows, first = [], [], None
        for seed in self.seeds:  # independent noise draws: the floor must hold on each
            if self.mode == "query":
                Y = _unit(m.privatize(c.Q, rng=seed))
                P = Y @ c.D.T
            elif self.mode == "subspace+rerank":
                Y = _unit(m.privatize(c.D, rng=seed))
                P = _unit(m.public_transform(c.Q)) @ Y.T
            else:
                Y = _unit(m.privatize(c.D, rng=seed))
                P = c.Q @ Y.T
            first = Y if first is None else first
            if self.metric == "mean_cosine":  # plain only
                cos = np.einsum("ij,ij->i", Y, c.D)
                mean = np.array([cos.mean()])
                low = mean - _Z95 * float(cos.std(ddof=1)) / math.sqrt(cos.size)
            else:
                mean, low = _recall_curve(_ranks(c, P), self.depths)
            means.append(mean)
            lows.append(low)
        assert first is not None
        mean_c = np.mean(means, axis=0)
        low_c = np.min(lows, axis=0)
        hit = np.flatnonzero(low_c >= self.floor)
        i = int(hit[0]) if hit.size else len(low_c) - 1
        depth = c.k if self.metric == "mean_cosine" else int(self.depths[i])
        return _Probe(bool(hit.size), float(mean_c[i]), float(low_c[i]), depth, m, first)


def _search(runner: _ModeRunner, grid: Sequence[float]) -> tuple[float, _Probe | None, int]:
    """Smallest grid epsilon whose probe meets the floor (bisection on indices), else the top
    (None: the mechanism cannot be built there)."""
    probes = 1
    top = runner.probe(grid[-1])
    if top is None or not top.ok:
        return grid[-1], top, probes
    lo, hi, best = -1, len(grid) - 1, top  # invariant: grid[hi] meets, grid[lo] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = runner.probe(grid[mid])
        probes += 1
        if p is not None and p.ok:
            hi, best = mid, p
        else:
            lo = mid
    return grid[hi], best, probes


def _linkage(
    name: str, Y: NDArray[np.float64], ref: NDArray[np.float64], max_records: int
) -> AttackEvidence:
    """Top-1 linkage of Y to its originals ``ref`` (row i from row i), with the clean check."""
    from ..attacks import LinkageAttack

    n = Y.shape[0]
    if n > max_records:
        idx = np.sort(spawn(0, 1)[0].choice(n, max_records, replace=False))
        Y, ref = Y[idx], ref[idx]
    att = LinkageAttack(ks=(1,))
    at, clean = att.score(Y, ref).result(), att.score(ref, ref).result()
    ev = AttackEvidence.from_results(at, clean)
    return ev if name == "linkage" else AttackEvidence(name, *_fields(ev))


def _verdicts(
    mode: str,
    evidence: Sequence[AttackEvidence],
    *,
    mechanism: str,
    epsilon: float | None,
    dim: int,
    model: str | None,
    mech: Mechanism | None = None,
) -> list[ThreatVerdict]:
    """Each threat's verdict: the attacks run now, never weaker than the project's stored
    evidence for the same mechanism, epsilon, mode and dimension
    (:func:`~privembed.evaluation.evidence.with_stored_evidence`)."""
    from .evidence import with_stored_evidence

    cos = getattr(mech, "expected_cosine", None)
    cosine = cos(dim) if callable(cos) and mode in ("plain", "rerank") else None
    out: dict[str, ThreatVerdict] = {}
    for t in sorted(threats_for(mode), key=lambda t: t.implied_by is not None):
        if t.defended_by == "deployment":
            v = judge_structural(t, keyed=True, ledger=True)
            out[t.name] = ThreatVerdict(
                t, v.verdict, v.reason + "; only when indexed with a key (--key-file) and a ledger"
            )
        elif t.implied_by is not None:  # quotes the stronger attacker's final verdict
            v = judge(t, evidence)
            stronger = out.get(t.implied_by)
            if stronger is not None:
                v = ThreatVerdict(
                    t,
                    v.verdict,
                    "no attack without auxiliary data is implemented; against "
                    f"{stronger.threat.title} (who holds more): {stronger.verdict}",
                )
            out[t.name] = v
        else:
            out[t.name] = with_stored_evidence(
                judge(t, evidence), mechanism=mechanism, epsilon=epsilon, mode=mode, dim=dim,
                model=model, cosine=cosine,
            )  # fmt: skip
    return [out[t.name] for t in threats_for(mode)]


def advise_modes(
    X: Any,
    *,
    queries: Any = None,
    modes: Sequence[str] = MODES,
    mechanisms: Sequence[str] = ("gaussian", "laplace", "purkayastha"),
    params: Mapping[str, Mapping[str, Any]] | None = None,
    min_recall: float = 0.9,
    min_cosine: float | None = None,
    max_depth: int | None = None,
    max_ldp_epsilon: float | None = None,
    basis: Any = None,
    basis_epsilon: float = 1.0,
    basis_delta: float = 1e-5,
    n_queries: int = 200,
    max_bytes_per_query: float | None = DEFAULT_MAX_BYTES,
    max_latency_ms: float | None = None,
    max_sync_bytes: float | None = DEFAULT_MAX_SYNC_BYTES,
    client_cache: bool = True,
    rates: Rates | None = None,
    production_size: int | None = None,
    draws: int = 3,
    attacks: Sequence[Any] = (),
    linkage_records: int = 2000,
    seed: int = 0,
    grid: Sequence[float] = GRID,
    model: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ModesAdvice:
    """The smallest useful epsilon per deployment mode and mechanism, its cost and threats.

    Parameters
    ----------
    X : array_like, shape (n, d)
        The documents' clean embeddings.
    queries : array_like (nq, d), optional
        Real query embeddings; without them up to ``n_queries`` documents, diluted by
        :func:`privembed.search.rerank.pseudo_queries`, stand in (the result says so).
    modes : sequence of str
        Any of :data:`MODES`.
    mechanisms : sequence of str
        Noise laws tried in every mode (``laplace``, ``gaussian``, ``purkayastha``; the
        subspace mode uses the same law in k dimensions).
    params : dict, optional
        Extra parameters per mechanism (e.g. ``{"gaussian": {"delta": 1e-5}}``).
    min_recall : float in (0, 1]
        Utility floor: recall of the clean top 10 within the k' fetched (lower end of the 95%
        interval over queries).
    min_cosine : float, optional
        For ``plain`` only: the floor is the mean cosine to the original instead.
    max_depth : int, optional
        Largest k' (candidates fetched, payloads opened per query) a mode may use outright.
        Whatever the budget, never more than a quarter of the corpus (:data:`DEPTH_SHARE`):
        fetching more is close to fetching all of it, and then any epsilon "works".
    max_bytes_per_query, max_latency_ms : float, optional
        The cost budget per query, in the user's units (default 4 MB, no latency limit): each
        mode's largest k' is what the budget pays for at this corpus size
        (:mod:`privembed.evaluation.cost`), and every setting shows its cost.
    max_sync_bytes, client_cache : optional
        The sealed mode: with ``client_cache`` (default) the client fetches every payload once
        per session (at most ``max_sync_bytes``, default 64 MB) and answers queries from the
        opened vectors; without it every query fetches them all (the per-query budget).
    rates : privembed.evaluation.cost.Rates, optional
        Per-payload and per-scan times for the latency estimate (default: measured here).
    production_size : int, optional
        The corpus size the user will index: k' and bytes per query are predicted there for
        the best noise setting (:class:`DepthPrediction`, from k' measured at n/4, n/2, n).
    max_ldp_epsilon : float, optional
        Only settings whose per-record LDP epsilon is at most this are recommended.
    basis : SubspaceBasis, array (m, d) of public embeddings, or None
        For ``subspace+rerank``: a basis from public embeddings (exact PCA, no privacy cost);
        None computes one from ``X`` by DP-PCA at (``basis_epsilon``, ``basis_delta``),
        charged to every record (the guarantee shown is the composition).
    draws : int
        Independent noise draws per probe; the floor must hold on each (the lower end of each
        draw's 95% interval over queries). The queries share the documents' noise, so the
        spread between draws is wider than one draw's interval over queries suggests.
    attacks : sequence of privacy metrics
        More attacks run at the recommended setting only, each with its strength check on the
        clean vectors (a metric with ``check``, e.g. the adaptive token attack,
        :class:`~privembed.evaluation.TokenLeakage`): their evidence joins the linkage attack's
        in the threat verdicts.
    seed : int
        Seeds the pseudo-queries, DP-PCA and every noise draw.
    model : str, optional
        The embedding model's name or identity: the project's stored evidence
        (:mod:`privembed.evaluation.evidence`) lowers a verdict on any model of its dimension,
        and supports "defends" only on its own model.

    Returns
    -------
    ModesAdvice

    Raises
    ------
    ValueError
        An unknown mode or a floor out of range.
    """
    say = on_step or (lambda _msg: None)
    D = _documents(X)
    seed, draws, floor = _check_options(
        D, seed, draws, max_depth, min_recall, modes, min_cosine, mechanisms
    )
    budget = Budget(max_bytes_per_query, max_latency_ms, max_depth, max_sync_bytes, client_cache)
    g_pq, g_basis = spawn(seed, 2)
    qd = _query_data(queries, D, n_queries, g_pq)
    search = _Search(
        clean=_Clean(D, qd.Q),
        qd=qd,
        floor=floor,
        min_cosine=min_cosine,
        budget=budget,
        rates=rates or Rates.measure(D.shape[1]),
        seed=seed,
        draws=draws,
        grid=grid,
        linkage_records=linkage_records,
        params=_law_params(params, mechanisms),
        basis=_subspace_basis(modes, basis, D, basis_epsilon, basis_delta, g_basis, say),
        model=model,
    )
    settings, releases = search.run(modes, mechanisms, say)
    result = search.advice(settings, max_ldp_epsilon)
    if production_size is not None:
        target = check_int("production_size", production_size, ge=D.shape[0])
        best = result.recommended_noise
        if best is not None and best.mode in ("rerank", "subspace+rerank", "query"):
            say(f"predicting k' at n = {target:,} for {best.label}")
            result.prediction = search.predict(best, target)
    _attack_recommended(result, releases, attacks, D, seed, say)
    return result


def load_advice(path: Any) -> dict[str, Any]:
    """A recommendation saved by :meth:`ModesAdvice.save` (``privembed advise --save``).

    Raises
    ------
    privembed.DataError
        Missing, not JSON, or not a saved recommendation (one line naming the file).
    """
    import json

    p = Path(path)
    if not p.is_file():
        raise DataError(f"advice file not found: {p}")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{p.name} is not a saved recommendation (not JSON: {e}).") from None
    if not isinstance(doc, dict) or doc.get("format") != ADVICE_FORMAT:
        raise DataError(
            f"{p.name} is not a saved recommendation (format {ADVICE_FORMAT!r}; write one with "
            "'privembed advise --save FILE')."
        )
    return doc


def _documents(X: Any) -> NDArray[np.float64]:
    """The documents as unit rows; at least 12 of them (a clean top 10 and a query)."""
    A, _ = check_embeddings(X, name="X")
    D = _unit(A)
    n = D.shape[0]
    if n < 12:
        raise DataError(f"advise needs at least 12 documents (a clean top 10), got {n}.")
    return D


def _check_options(
    D: NDArray[np.float64],
    seed: int,
    draws: int,
    max_depth: int | None,
    min_recall: float,
    modes: Sequence[str],
    min_cosine: float | None,
    mechanisms: Sequence[str],
) -> tuple[int, int, float]:
    """The checked seed, draws and recall floor; the depth limit, the modes, the cosine floor
    and the noise laws are checked too."""
    seed = check_int("seed", seed, ge=0)
    draws = check_int("draws", draws, ge=1)
    if max_depth is not None:
        check_int("max_depth", max_depth, ge=TOP_K)
    floor = check_real("min_recall", min_recall, gt=0, le=1)
    for m in modes:
        if m not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got mode={m!r}.")
    if min_cosine is not None:
        check_real("min_cosine", min_cosine, gt=-1, le=1)
    for name in mechanisms:
        if name not in LAWS:
            raise ValueError(
                f"the mode advice tries the noise laws {', '.join(LAWS)} (also in a subspace), "
                f"got mechanism {name!r}; use --plain-only for other mechanisms."
            )
    return seed, draws, floor


def advice_queries(X: Any, *, seed: int = 0, n_queries: int = 200) -> NDArray[np.float64]:
    """The pseudo-queries :func:`advise_modes` measures with when it is given none (the same
    seed, the same draw): for a caller that checks a recommendation on the queries it was made
    on (the demo)."""
    D = _documents(X)
    g_pq, _ = spawn(check_int("seed", seed, ge=0), 2)
    return _query_data(None, D, n_queries, g_pq).Q


def _query_data(
    queries: Any, D: NDArray[np.float64], n_queries: int, rng: np.random.Generator
) -> QueryData:
    """The real queries as unit rows, else up to ``n_queries`` pseudo-queries from ``D``."""
    if queries is None:
        from ..search.rerank import pseudo_queries

        n = D.shape[0]
        nq = min(check_int("n_queries", n_queries, ge=2), n)
        pick = np.sort(rng.choice(n, nq, replace=False))
        return QueryData(_unit(pseudo_queries(D[pick], rng=rng)), "pseudo-queries")
    Qa, _ = check_embeddings(queries, name="queries", dim=D.shape[1])
    return QueryData(_unit(Qa), "queries")


def _law_params(
    params: Mapping[str, Mapping[str, Any]] | None, mechanisms: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Extra parameters per noise law (the Gaussian law's delta defaults to 1e-5)."""
    extra = {k: dict(v) for k, v in (params or {}).items()}
    if "gaussian" in mechanisms:
        extra.setdefault("gaussian", {}).setdefault("delta", 1e-5)
    return extra


def _subspace_basis(
    modes: Sequence[str],
    basis: Any,
    D: NDArray[np.float64],
    basis_epsilon: float,
    basis_delta: float,
    rng: np.random.Generator,
    say: Callable[[str], None],
) -> Any:
    """The subspace mode's basis: the one given, exact PCA of public embeddings, or DP-PCA of
    ``D`` (None when the subspace mode is not tried)."""
    if "subspace+rerank" not in modes:
        return None
    from ..mechanisms.subspace import SubspaceBasis, dp_pca

    if basis is None:
        say(f"subspace: DP-PCA basis at epsilon_p = {basis_epsilon:g}")
        return dp_pca(D, epsilon=basis_epsilon, delta=basis_delta, rng=rng)
    if isinstance(basis, SubspaceBasis):
        return basis
    Bp, _ = check_embeddings(basis, name="basis embeddings", dim=D.shape[1])
    return SubspaceBasis.from_embeddings(Bp)


@dataclass(frozen=True)
class _Search:
    """What the search of every (mode, noise law) shares: the data, the floor and the limits."""

    clean: _Clean
    qd: QueryData
    floor: float
    min_cosine: float | None
    budget: Budget
    rates: Rates
    seed: int
    draws: int
    grid: Sequence[float]
    linkage_records: int
    params: Mapping[str, Mapping[str, Any]]
    basis: Any
    model: str | None = None

    def run(
        self, modes: Sequence[str], mechanisms: Sequence[str], say: Callable[[str], None]
    ) -> tuple[list[ModeSetting], dict[tuple[str, str], tuple[Mechanism, Any]]]:
        """The setting of every (mode, law), and the release found for each that has one."""
        out: list[ModeSetting] = []
        releases: dict[tuple[str, str], tuple[Mechanism, Any]] = {}
        for mode in modes:
            if mode == "sealed":  # no noise law: one setting
                say("sealed: the cost of fetching every payload")
                out.append(self.sealed())
                continue
            for name in mechanisms:
                say(f"{mode} / {name}: searching the smallest epsilon")
                setting, p = self.setting(mode, name)
                out.append(setting)
                if p is not None:
                    releases[(mode, name)] = (p.mech, p.Y)
        return out, releases

    def predict(self, setting: ModeSetting, target: int) -> DepthPrediction | None:
        """k' of ``setting`` (at its epsilon) measured on random subsets of n/4 and n/2
        documents with the same queries and seeds, fitted as n^b with its n, and extrapolated
        to ``target`` documents (:class:`DepthPrediction`)."""
        D, Q = self.clean.D, self.clean.Q
        n = D.shape[0]
        sizes = [max(4 * TOP_K, n // 4), max(4 * TOP_K, n // 2)]
        if setting.epsilon is None or sizes[0] >= sizes[1] or sizes[1] >= n:
            return None
        pick = spawn(self.seed + 104729, 1)[0].permutation(n)
        depths = []
        for m in sizes:
            sub = _Clean(D[np.sort(pick[:m])], Q)
            runner = _ModeRunner(
                setting.mode, setting.mechanism, self.params.get(setting.mechanism, {}), sub,
                floor=self.floor, metric="recall", max_depth=m, seed=self.seed,
                basis=self.basis, draws=self.draws,
            )  # fmt: skip
            p = runner.probe(float(setting.epsilon))
            if p is None or not p.ok:
                return None
            depths.append(p.depth)
        depths.append(setting.depth)
        ns = [*sizes, n]
        # k' at n over independent draws: its relative spread widens the range
        again = []
        for j in (1, 2):
            runner = _ModeRunner(
                setting.mode, setting.mechanism, self.params.get(setting.mechanism, {}),
                self.clean, floor=self.floor, metric="recall", max_depth=n,
                seed=self.seed + 15485863 * j, basis=self.basis, draws=self.draws,
            )  # fmt: skip
            p = runner.probe(float(setting.epsilon))
            if p is not None and p.ok:
                again.append(p.depth)
        seen = [setting.depth, *again]
        spread = (max(seen) - min(seen)) / float(np.median(seen))
        b = [math.log(depths[i + 1] / depths[i]) / math.log(ns[i + 1] / ns[i]) for i in (0, 1)]
        slope = math.log(depths[2] / depths[0]) / math.log(ns[2] / ns[0])
        grow = target / n
        pred = min(target, round(depths[2] * grow**slope))
        low = min(target, math.floor(depths[2] * grow ** min(b) * (1 - spread)))
        high = min(target, math.ceil(depths[2] * grow ** max(1.0, max(b)) * (1 + spread)))
        store_dim = setting.subspace_k or D.shape[1]
        low, high = min(low, pred), max(high, pred)

        def cost(depth: int) -> int:
            return query_cost(
                setting.mode, n=target, d=D.shape[1], store_dim=store_dim, depth=max(1, depth),
                rates=self.rates,
            ).bytes  # fmt: skip

        return DepthPrediction(
            setting.mode, setting.mechanism, float(setting.epsilon), tuple(ns), tuple(depths),
            slope, (min(b), max(b)), target, pred, low, high, cost(pred), spread, cost(low),
            cost(high),
        )  # fmt: skip

    def sealed(self) -> ModeSetting:
        """The sealed mode: exact, so the floor is met; whether fetching all ``n`` payloads
        per query fits the budget decides whether it is available."""
        from ..keys.payload import payload_size

        n, d = self.clean.D.shape
        cost = sealed_cost(n=n, d=d, rates=self.rates, client_cache=self.budget.client_cache)
        fits = self.budget.sealed_fits(cost)
        fetch = cost.sync_bytes or cost.bytes
        when = "once per session" if cost.sync_bytes else "on every query"
        notes = [] if fits else [
            f"fetching all {n:,} payloads ({fetch / 1e6:.2f} MB {when}) is over the budget "
            f"({self.budget.text()})"
        ]  # fmt: skip
        return ModeSetting(
            mode="sealed",
            mechanism="aes-gcm",
            epsilon=None,
            meets_floor=fits,
            utility=1.0,
            utility_low=1.0,
            metric="recall",
            depth=n,
            probes=0,
            config={"mode": "sealed", "cipher": "AES-256-GCM", "padding": "padme"},
            guarantee="sealed (AES-256-GCM, padded payloads): no vector in the store",
            guarantee_short="sealed: no vector in the store",
            payload_bytes_per_query=n * payload_size(d),
            decryptions_per_query=n,
            verdicts=[judge_sealed(t) for t in threats_for("sealed")] if fits else [],
            notes=notes,
            cost=cost,
            depth_cap=n if fits else 0,
        )

    def setting(self, mode: str, name: str) -> tuple[ModeSetting, _Probe | None]:
        """The smallest epsilon of one (mode, law) meeting the floor, or the nearest point, and
        its probe (None: the mechanism cannot be built at the top of the grid)."""
        if mode == "plain" and self.min_cosine is not None:  # the floor is on the mean cosine
            metric, floor = "mean_cosine", float(self.min_cosine)
        else:
            metric, floor = "recall", self.floor
        n, d = self.clean.D.shape
        store_dim = d
        if mode == "subspace+rerank" and self.basis is not None:
            # the mechanism keeps k <= m components: the budget is checked at m (an upper bound)
            store_dim = min(d, int(self.basis.components.shape[0]))
        cap = min(
            max(TOP_K, n // DEPTH_SHARE),
            self.budget.depth_cap(mode, n=n, d=d, store_dim=store_dim, rates=self.rates),
        )
        if cap < self.clean.k:
            note = (
                f"not available: the budget ({self.budget.text()}) does not pay for "
                f"k' = {self.clean.k} at n = {n:,}"
            )
            return ModeSetting(
                mode, name, None, False, math.nan, math.nan, metric, 0, 0, notes=[note]
            ), None
        runner = _ModeRunner(
            mode,
            name,
            self.params.get(name, {}),
            self.clean,
            floor=floor,
            metric=metric,
            max_depth=cap,
            seed=self.seed,
            basis=self.basis,
            draws=self.draws,
        )
        eps, p, probes = _search(runner, self.grid)
        if p is None:
            note = f"not available: {runner.error}"
            unavailable = ModeSetting(
                mode, name, None, False, math.nan, math.nan, metric, 0, probes, notes=[note]
            )
            return unavailable, None
        setting = _setting(
            mode, name, eps, p, probes, runner, self.qd, self.linkage_records, self.model
        )
        setting.at_grid_bottom = p.ok and eps == self.grid[0]
        setting.depth_cap = cap if mode != "plain" else self.clean.k
        held = setting.subspace_k if setting.subspace_k else store_dim
        setting.cost = query_cost(
            mode, n=n, d=d, store_dim=held, depth=setting.depth, rates=self.rates
        )
        return setting, p

    def advice(self, settings: list[ModeSetting], max_ldp_epsilon: float | None) -> ModesAdvice:
        """The advice made of the settings found."""
        n, d = self.clean.D.shape
        return ModesAdvice(
            floor=self.floor,
            min_cosine=None if self.min_cosine is None else float(self.min_cosine),
            budget=self.budget,
            queries=self.qd.source,
            n=n,
            d=d,
            settings=settings,
            max_ldp_epsilon=max_ldp_epsilon,
            seed=self.seed,
            model=self.model,
        )


def _attack_recommended(
    result: ModesAdvice,
    releases: Mapping[tuple[str, str], tuple[Mechanism, Any]],
    attacks: Sequence[Any],
    D: NDArray[np.float64],
    seed: int,
    say: Callable[[str], None],
) -> None:
    """Run the extra ``attacks`` at the recommended setting only; their evidence joins its
    threat verdicts."""
    r = result.recommended
    if r is not None and r.mode == "sealed":
        if attacks:
            say("sealed: no attack on the store applies (it holds ciphertext only)")
        return
    if attacks and r is not None:
        mech, Y = releases[(r.mode, r.mechanism)]
        say(f"{r.label}: running {len(attacks)} more attack(s) at the recommended setting")
        r.evidence.extend(_run_attacks(attacks, D, mech, Y, seed))
        r.verdicts = _verdicts(
            r.mode, r.evidence, mechanism=r.mechanism, epsilon=r.epsilon, dim=D.shape[1],
            model=result.model, mech=mech,
        )  # fmt: skip


def _run_attacks(
    attacks: Sequence[Any], D: NDArray[np.float64], mech: Mechanism, Y: Any, seed: int
) -> list[AttackEvidence]:
    """Each attack's strength check on the clean vectors and its result at the setting, as
    evidence: a metric with ``check(release) -> (columns, StrengthCheck)`` (e.g.
    :class:`~privembed.evaluation.TokenLeakage`)."""
    from .privacy import CellRelease, Unprotected

    clean_rng, rng = spawn(seed, 2)
    ident = Unprotected()
    out = []
    for a in attacks:
        _, clean = a.check(CellRelease(ident, D, ident.privatize(D), clean_rng))
        _, at = a.check(CellRelease(mech, D, np.asarray(Y), rng))
        low, high = at.chance + at.excess_low, at.chance + at.excess_high
        out.append(
            AttackEvidence(
                at.attack,
                at.statistic,
                at.value,
                at.chance,
                min(low, at.value),
                max(high, at.value),
                clean.excess_low,
                clean.value,
            )
        )
    return out


def _setting(
    mode: str,
    name: str,
    eps: float,
    p: _Probe,
    probes: int,
    runner: _ModeRunner,
    qd: QueryData,
    linkage_records: int,
    model: str | None = None,
) -> ModeSetting:
    from ..keys.payload import payload_size

    m = p.mech
    composed = getattr(m, "composed_guarantee", None)
    g = composed() if callable(composed) else m.guarantee
    ldp = implied_ldp(g)
    clean = runner.clean
    evidence: list[AttackEvidence] = []
    notes: list[str] = []
    if mode == "query":
        evidence.append(_linkage("linkage", p.Y, clean.Q, linkage_records))
        notes.append(
            "protects queries only: the store holds the documents in the clear; the linkage "
            "attack links protected queries to candidate queries"
        )
    elif mode == "subspace+rerank":
        ref = _unit(m.public_transform(clean.D))
        ev = _linkage("linkage_basis", p.Y, ref, linkage_records)
        evidence.append(ev)
        # a candidate holder estimates the basis by PCA of the candidates; measured with the
        # true basis, an upper bound on what such an attacker gets
        evidence.append(AttackEvidence("linkage", *_fields(ev)))
        notes.append(
            "candidate-holder linkage measured with the basis (an attacker can estimate it by "
            "PCA of the candidates): an upper bound"
        )
    else:
        evidence.append(_linkage("linkage", p.Y, clean.D, linkage_records))
    k_sub = getattr(m, "k", None) if mode == "subspace+rerank" else None
    basis = runner.basis
    if k_sub is not None and k_sub <= 2 and getattr(basis, "guarantee", None) is not None:
        notes.append(
            f"the DP-PCA basis of {clean.D.shape[0]} records keeps k = {k_sub} component(s) "
            "above its noise floor: too few records for DP-PCA at this epsilon_p; give public "
            "embeddings (--basis)"
        )
    reranked = mode != "plain"
    depth = p.depth if reranked else clean.k
    return ModeSetting(
        mode=mode,
        mechanism=name,
        epsilon=float(eps) if p.ok else None,
        meets_floor=p.ok,
        utility=p.utility,
        utility_low=p.low,
        metric=runner.metric,
        depth=depth,
        probes=probes,
        config=dict(m.config) if hasattr(m, "config") else {},
        guarantee=g.describe(),
        guarantee_short=g.short(),
        ldp_epsilon=None if ldp is None else ldp[0],
        ldp_delta=None if ldp is None else ldp[1],
        subspace_k=k_sub,
        payload_bytes_per_query=depth * payload_size(clean.D.shape[1])
        if mode in ("rerank", "subspace+rerank")
        else 0,
        decryptions_per_query=depth if mode in ("rerank", "subspace+rerank") else 0,
        evidence=evidence,
        verdicts=_verdicts(
            mode,
            evidence,
            mechanism=name,
            epsilon=float(eps),
            dim=clean.D.shape[1],
            model=model,
            mech=m,
        )
        if p.ok
        else [],
        notes=notes if p.ok else [*notes, f"nearest point: epsilon {eps:.4g}, top of the grid"],
    )


def _fields(e: AttackEvidence) -> tuple[str, float, float, float, float, float, float | None]:
    return (e.statistic, e.value, e.blind, e.low, e.high, e.clean_excess_low, e.clean)
