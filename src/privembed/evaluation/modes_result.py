"""What :func:`~privembed.evaluation.modes.advise_modes` answers: the modes and their constants,
one :class:`ModeSetting` per (mode, noise law), the k' predicted at the production size
(:class:`DepthPrediction`), and :class:`ModesAdvice` -- the ranking that picks the
recommendation, its printed lines, and ``advice.json`` (:meth:`ModesAdvice.save`,
:func:`load_advice`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError
from .cost import Budget, QueryCost
from .threats import DOES_NOT_DEFEND, THREATS, AttackEvidence, ThreatVerdict

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
