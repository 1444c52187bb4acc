"""The recommendation: a configuration must be useful *and* resist the attacks.

A configuration is recommended only if its means meet every **utility floor** (a utility
metric, e.g. ``knn_overlap@10 >= 0.5``) *and* every **attack ceiling** (e.g. top-1 linkage at
most :data:`REID_CHANCE_MULTIPLE` times a random guess's rate, token leakage within the blind
attacker's interval), and no other such configuration is better on every axis
(Pareto-optimal). When none meets both, :meth:`Recommendation.sentence` says so in one plain
sentence and names the nearest configuration on each side of the frontier.

Utility floors are utility metrics only. Top-1 self-retrieval (``top1_originals``,
``recall@k_originals``, ``top1_protected``, ``recall@k_protected``) is *re-identification*
read from the other side -- the share of protected vectors linked back to their record -- so a
floor on it asks for linkability; it is refused with a message naming the alternatives.

Ceilings only come from attacks that proved their strength on unprotected embeddings
(:class:`~privembed.evaluation.privacy.StrengthCheck`): the numbers of an attack too weak to
beat chance there are no evidence about protection, and a ceiling on them would pass every
configuration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .privacy import StrengthCheck
from .sweep import SweepConfig, SweepResult

__all__ = [
    "DEFAULT_UTILITY_FLOOR",
    "KEY_PRIVACY",
    "KEY_UTILITY",
    "REID_CHANCE_MULTIPLE",
    "Floor",
    "Recommendation",
    "ceilings_from",
    "default_ceilings",
    "is_linkability",
    "parse_floors",
    "recommend",
]

#: utility columns preferred as the recommendation's utility axis, in this order (never a
#: linkability column)
KEY_UTILITY = ("knn_overlap@10", "ndcg@10", "sts_pearson", "mean_cosine")
#: privacy columns preferred for the frontier's risk axis
KEY_PRIVACY = ("leakage", "reid@1", "auc_sensitive", "confidence")

#: Default linkage ceiling: top-1 re-identification at most this multiple of a random guess's
#: rate (1 / candidates). Five times chance keeps an attacker holding the original embeddings
#: to at most about one record in 200 when 1,000 are attacked (one in 400 for the default
#: 2,000), where "re-identified" stops meaning "this record is findable" -- and at 5x chance
#: the 95% Wilson interval of a rate measured on 300 records or more already excludes chance
#: (1/300 -> 0.017 vs an interval starting at 0.007), so the ceiling is measurably below what
#: an attack that works gets.
REID_CHANCE_MULTIPLE = 5.0


_LINKABILITY = re.compile(r"^(top1|recall@\d+)_(originals|protected)$")


def is_linkability(metric: str) -> bool:
    """Whether a column measures whether one record can be found (re-identification), which
    is not a utility: ``top1_originals``, ``recall@k_originals`` and their ``_protected`` twins.

    Examples
    --------
    >>> is_linkability("top1_originals"), is_linkability("knn_overlap@10")
    (True, False)
    """
    return bool(_LINKABILITY.match(metric))


@dataclass(frozen=True)
class Floor:
    """A requirement on a metric's mean: ``>= value`` (``op=">="``) or ``<= value``.

    ``note`` explains where the value comes from (e.g. "5 × chance 0.0033").
    """

    metric: str
    op: str
    value: float
    note: str = field(default="", compare=False, repr=False)

    def ok(self, mean: float) -> bool:
        if not math.isfinite(mean):
            return False
        return mean >= self.value if self.op == ">=" else mean <= self.value

    def shortfall(self, mean: float) -> float:
        """How far ``mean`` is from meeting this requirement (0 if it meets it)."""
        if not math.isfinite(mean):
            return math.inf
        gap = self.value - mean if self.op == ">=" else mean - self.value
        return max(0.0, gap)

    def text(self) -> str:
        s = f"{self.metric} {'≥' if self.op == '>=' else '≤'} {self.value:.3g}"
        return s + (f" ({self.note})" if self.note else "")


#: The floor used when none is given: half of every record's 10 nearest neighbours (cosine,
#: among the records) survive protection. Below that, search over protected vectors mostly
#: returns other records than the clean search would: on the demo notes (all-MiniLM-L6-v2)
#: a mean cosine of 0.46 kept 0.08 of the 10 nearest neighbours (docs/evaluation.md).
DEFAULT_UTILITY_FLOOR = Floor("knn_overlap@10", ">=", 0.5, note="default floor")


def parse_floors(specs: Sequence[str]) -> list[Floor]:
    """Parse ``"knn_overlap@10>=0.5"`` / ``"leakage<=0.2"`` strings.

    Examples
    --------
    >>> parse_floors(["knn_overlap@10>=0.5", "leakage <= 0.2"])
    [Floor(metric='knn_overlap@10', op='>=', value=0.5), Floor(metric='leakage', op='<=', value=0.2)]
    """
    out = []
    for s in specs:
        m = re.fullmatch(r"\s*([\w@.\-]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*", s)
        if not m:
            raise ValueError(
                f"a floor must look like 'metric>=value' or 'metric<=value', got {s!r}."
            )
        out.append(Floor(m.group(1), m.group(2), float(m.group(3))))
    return out


def _mean(result: SweepResult, c: SweepConfig, metric: str) -> float:
    return result.stats(c, metric)[0]


def ceilings_from(
    baseline: Mapping[str, Any],
    checks: Mapping[str, StrengthCheck],
    *,
    reid_multiple: float = REID_CHANCE_MULTIPLE,
) -> list[Floor]:
    """The default attack ceilings for the attacks whose columns appear in ``baseline`` (their
    values on the unprotected embeddings), leaving out attacks whose check failed.

    * linkage (``reid@1`` with its ``reid_chance@1``): ``reid@1 <= reid_multiple * chance``;
    * token inference (``leakage_excess_low``): ``leakage_excess_low <= 0`` -- the lower end
      of the 95% interval of (leakage - the blind attacker's leakage) is not above 0, i.e. the
      leakage is within the blind baseline's interval.

    Examples
    --------
    >>> [f.text() for f in ceilings_from({"reid@1": 1.0, "reid_chance@1": 0.002}, {})]
    ['reid@1 ≤ 0.01 (5 × chance 0.002)']
    """
    if not (reid_multiple > 0 and math.isfinite(reid_multiple)):
        raise ValueError(f"reid_multiple must be > 0, got reid_multiple={reid_multiple!r}.")

    def strong(column: str) -> bool:
        return all(c.passed for c in checks.values() if column in c.columns)

    out = []
    chance = baseline.get("reid_chance@1")
    if "reid@1" in baseline and chance is not None and strong("reid@1"):
        out.append(
            Floor(
                "reid@1",
                "<=",
                reid_multiple * float(chance),
                note=f"{reid_multiple:g} × chance {float(chance):.3g}",
            )
        )
    if "leakage_excess_low" in baseline and strong("leakage_excess_low"):
        out.append(
            Floor(
                "leakage_excess_low",
                "<=",
                0.0,
                note="token leakage within the blind attacker's 95% interval",
            )
        )
    return out


def default_ceilings(
    result: SweepResult, *, reid_multiple: float = REID_CHANCE_MULTIPLE
) -> list[Floor]:
    """The attack ceilings that the sweep's attacks support (:func:`ceilings_from` on its
    unprotected baseline row and attack checks)."""
    names = set(result.metric_names())
    base: dict[str, Any] = {k: v for k, v in result.baseline.items() if k in names}
    if "reid@1" in names and base.get("reid_chance@1") is None:
        vals = [_mean(result, c, "reid_chance@1") for c in result.configs]
        finite = [v for v in vals if math.isfinite(v)]
        if finite:
            base["reid_chance@1"] = max(finite)
    for col in ("reid@1", "leakage_excess_low"):
        if col in names:
            base.setdefault(col, None)
    return ceilings_from(base, result.checks, reid_multiple=reid_multiple)


@dataclass(frozen=True)
class Recommendation:
    """Configurations that meet the utility floors *and* the attack ceilings, Pareto-optimal.

    Attributes
    ----------
    floors : list of Floor
        Utility floors (``>=`` on utility columns).
    ceilings : list of Floor
        Attack ceilings (``<=`` on attack columns) from attacks that beat chance.
    feasible : list of SweepConfig
        Configurations whose means meet every floor and every ceiling.
    pareto : list of SweepConfig
        The feasible configurations no other feasible one dominates.
    utility_axes, privacy_axes : list of str
        The metrics compared (maximised / minimised); privacy axes exclude weak attacks.
    note : str
        How the comparison was made (and its limits).
    nearest_utility : SweepConfig or None
        When nothing is feasible: of the configurations that meet the floors, the one closest
        to the ceilings (smallest total shortfall, in the metrics' units).
    nearest_attack : SweepConfig or None
        When nothing is feasible: of those that meet the ceilings, the one closest to the floors.
    ignored : list of str
        Requirements not applied, and why (e.g. a ceiling on an attack too weak).
    """

    floors: list[Floor]
    feasible: list[SweepConfig]
    pareto: list[SweepConfig]
    utility_axes: list[str]
    privacy_axes: list[str]
    note: str
    ceilings: list[Floor] = field(default_factory=list)
    nearest_utility: SweepConfig | None = None
    nearest_attack: SweepConfig | None = None
    ignored: list[str] = field(default_factory=list)

    @property
    def requirements(self) -> list[Floor]:
        return [*self.floors, *self.ceilings]

    def floor_text(self) -> str:
        return " and ".join(f.text() for f in self.floors) or "no utility floor"

    def ceiling_text(self) -> str:
        return " and ".join(f.text() for f in self.ceilings) or "no attack ceiling"

    def sentence(self, result: SweepResult) -> str:
        """One plain sentence: what is recommended, or that nothing meets both sides."""
        n = len(result.configs)
        sides = []
        if self.floors:
            sides.append(f"the utility floor {self.floor_text()}")
        if self.ceilings:
            sides.append(f"the attack ceiling {self.ceiling_text()}")
        what = " and ".join(sides) or "no requirement"
        if self.feasible:
            labels = ", ".join(c.label for c in self.pareto)
            extra = "" if self.ceilings else " No attack ceiling applies (see the attack checks)."
            return (
                f"Recommended for {what}: {labels} ({len(self.feasible)} of {n} "
                f"configurations meet {'both' if len(sides) == 2 else 'it'}).{extra}"
            )
        if len(sides) == 2:
            return (
                f"No configuration meets both {what}: at every tested setting either the "
                "utility is below the floor or the attacks succeed above the ceiling."
            )
        return f"No configuration meets {what} (none of {n})."

    def point_text(self, result: SweepResult, config: SweepConfig) -> str:
        """A configuration's label, guarantee and its numbers on every floor and ceiling."""
        parts = []
        for f in self.requirements:
            mean = _mean(result, config, f.metric)
            mark = "meets" if f.ok(mean) else "misses"
            op = "≥" if f.op == ">=" else "≤"
            parts.append(f"{f.metric} {mean:.3f} ({mark} {op} {f.value:.3g})")
        return f"{config.label} [{result.guarantee(config).short()}]: " + "; ".join(parts)

    def nearest_lines(self, result: SweepResult) -> list[str]:
        """The nearest frontier point on each side, one line each (empty if feasible)."""
        if self.feasible:
            return []
        sides = (
            (self.floors, "the utility floor", self.nearest_utility, "none meets it"),
            (
                self.ceilings,
                "the attack ceiling",
                self.nearest_attack,
                "none of the tested settings meets it with plain protected vectors (smaller "
                "epsilons would); the deployment recommendation (re-rank, subspace, sealed) is "
                "what 'privembed advise' prints",
            ),
        )
        return [
            f"nearest meeting {side}: "
            + (self.point_text(result, point) if point is not None else none)
            for required, side, point, none in sides
            if required
        ]


def _utility_axes(result: SweepResult, floors: Sequence[Floor]) -> list[str]:
    present = [m for m in result.metric_names("utility") if not is_linkability(m)]
    axes = [f.metric for f in floors if f.metric in present]
    if not axes:
        axes = [k for k in KEY_UTILITY if k in present][:1] or present[:1]
    return axes


def _epsilon_of(result: SweepResult, c: SweepConfig) -> float:
    g = result.guarantee(c)
    eps = getattr(g, "epsilon", math.inf)
    return float(eps)


def _split(result: SweepResult, requirements: Sequence[Floor]) -> tuple[list[Floor], list[Floor]]:
    """Utility floors and user ceilings, validated."""
    names = set(result.metric_names())
    floors, ceilings = [], []
    for f in requirements:
        if f.metric not in names:
            raise ValueError(
                f"floor on {f.metric!r}, but the sweep has no such column (it has: "
                f"{', '.join(sorted(names))})."
            )
        kind = result.column(f.metric).kind
        if f.op == ">=":
            if is_linkability(f.metric):
                raise ValueError(
                    f"{f.metric} is the re-identification rate (the share of protected vectors "
                    "linked back to their own record), not a utility: a floor on it asks for "
                    "linkability. Floor a utility metric instead: knn_overlap@10, mean_cosine, "
                    "sts_pearson or ndcg@10 (e.g. --min-overlap 0.5)."
                )
            if kind != "utility":
                raise ValueError(
                    f"{f.metric} is an attack ({kind}) column: give it as a ceiling "
                    f"('{f.metric}<=value'), not a floor."
                )
            floors.append(f)
        else:
            ceilings.append(f)
    return floors, ceilings


def _nearest(
    result: SweepResult, candidates: Sequence[SweepConfig], missing: Sequence[Floor]
) -> SweepConfig | None:
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda c: (sum(f.shortfall(_mean(result, c, f.metric)) for f in missing), c.label),
    )


def recommend(
    result: SweepResult,
    floors: Sequence[Floor] = (),
    *,
    ceilings: Sequence[Floor] | None = None,
    reid_multiple: float = REID_CHANCE_MULTIPLE,
    default_floor: bool = False,
) -> Recommendation:
    """The configurations that meet the utility ``floors`` and the attack ``ceilings``.

    Parameters
    ----------
    result : SweepResult
    floors : sequence of Floor
        ``>=`` requirements on utility columns (never a linkability column, see
        :func:`is_linkability`); ``<=`` requirements are taken as extra attack ceilings.
    ceilings : sequence of Floor, optional
        Attack ceilings (``<=``). Default: :func:`default_ceilings` (from the attacks that beat
        chance) plus the ``<=`` entries of ``floors``.
    reid_multiple : float
        Of the default linkage ceiling.
    default_floor : bool
        Apply :data:`DEFAULT_UTILITY_FLOOR` when ``floors`` has no utility floor (what the
        command line does).

    Notes
    -----
    Utility axes are the floored utility metrics (default: ``knn_overlap@10``, else the mean
    cosine); privacy axes are the measured attack columns of attacks not found too weak (lower
    is better). Without any such column the comparison falls back to each configuration's own
    epsilon *within its family* (the most private feasible configuration of every mechanism),
    because epsilons of different guarantee types cannot be compared.
    """
    util_floors, user_ceilings = _split(result, floors)
    if not util_floors and default_floor:
        if DEFAULT_UTILITY_FLOOR.metric in result.metric_names("utility"):
            util_floors = [DEFAULT_UTILITY_FLOOR]
    if ceilings is None:
        ceil = default_ceilings(result, reid_multiple=reid_multiple) + user_ceilings
    else:
        ceil = list(ceilings) + user_ceilings
        _split(result, ceil)
    ceil, ignored = _applied_ceilings(result, ceil)
    reqs = [*util_floors, *ceil]
    means = {c.key: {f.metric: _mean(result, c, f.metric) for f in reqs} for c in result.configs}

    def meets(c: SweepConfig, group: Sequence[Floor]) -> bool:
        return all(f.ok(means[c.key][f.metric]) for f in group)

    feasible = [c for c in result.configs if meets(c, reqs)]
    u_axes = _utility_axes(result, util_floors)
    p_axes = result.evidence_columns()
    if p_axes:
        pareto, note = _pareto_by_leakage(result, feasible, u_axes, p_axes)
    else:
        pareto, note = _smallest_epsilon_per_family(result, feasible)
    near_u = near_a = None
    if not feasible:
        near_u = _nearest(result, [c for c in result.configs if meets(c, util_floors)], ceil)
        near_a = _nearest(result, [c for c in result.configs if meets(c, ceil)], util_floors)
    return Recommendation(
        floors=util_floors,
        feasible=feasible,
        pareto=pareto,
        utility_axes=u_axes,
        privacy_axes=p_axes,
        note=note,
        ceilings=ceil,
        nearest_utility=near_u,
        nearest_attack=near_a,
        ignored=ignored,
    )


def _applied_ceilings(
    result: SweepResult, ceilings: Sequence[Floor]
) -> tuple[list[Floor], list[str]]:
    """The ceilings of attacks that proved their strength, and a line for each left out (and
    for every weak attack)."""
    ignored: list[str] = []
    kept = []
    for f in ceilings:
        chk = result.attack_check(f.metric)
        if chk is not None and not chk.passed:
            ignored.append(
                f"ceiling {f.text()} not applied: {chk.attack} is too weak ({chk.text()})"
            )
        else:
            kept.append(f)
    for chk in result.checks.values():
        if not chk.passed and not any(chk.attack in s for s in ignored):
            ignored.append(chk.text())
    return kept, ignored


def _pareto_by_leakage(
    result: SweepResult,
    feasible: Sequence[SweepConfig],
    u_axes: Sequence[str],
    p_axes: Sequence[str],
) -> tuple[list[SweepConfig], str]:
    """The feasible configurations no other dominates on utility and measured leakage (and,
    within a family, epsilon), and the note that says so."""

    def vec(c: SweepConfig) -> list[float]:
        u = [_mean(result, c, m) for m in u_axes]
        p = [-_mean(result, c, m) for m in p_axes]
        return [v if math.isfinite(v) else -math.inf for v in u + p]

    vecs = {c.key: vec(c) for c in feasible}
    fam = {c.key: f for f, cs in result.families().items() for c in cs}
    eps = {c.key: _epsilon_of(result, c) for c in feasible}

    def dominates(o: SweepConfig, c: SweepConfig) -> bool:
        a, b = vecs[o.key], vecs[c.key]
        if fam[o.key] == fam[c.key]:  # one family: its epsilons are comparable
            a, b = [*a, -eps[o.key]], [*b, -eps[c.key]]
        return all(x >= y for x, y in zip(a, b, strict=True)) and any(
            x > y for x, y in zip(a, b, strict=True)
        )

    pareto = [c for c in feasible if not any(dominates(o, c) for o in feasible if o.key != c.key)]
    note = (
        f"Pareto-optimal among the configurations meeting both sides, on utility "
        f"({', '.join(u_axes) or 'none'}: higher is better) and measured leakage "
        f"({', '.join(p_axes)}: lower is better), using the means over runs; within one "
        "mechanism family a smaller epsilon (a stronger guarantee of the same type) also "
        "counts as better."
    )
    return pareto, note


def _smallest_epsilon_per_family(
    result: SweepResult, feasible: Sequence[SweepConfig]
) -> tuple[list[SweepConfig], str]:
    """Without measured leakage: each family's feasible configuration with the smallest
    epsilon, and the note that says why."""
    pareto = []
    for _fam, cs in result.families().items():
        ok = [c for c in cs if c in feasible]
        if ok:
            pareto.append(min(ok, key=lambda c: _epsilon_of(result, c)))
    why = (
        "every attack was too weak to be evidence"
        if result.checks and not any(c.passed for c in result.checks.values())
        else "no attack was run"
    )
    note = (
        f"No measured leakage could be compared ({why}); within each mechanism the "
        "feasible configuration with the smallest epsilon is listed. Epsilons of different "
        "guarantee types (metric privacy per unit distance, pure LDP, (epsilon, delta)-LDP) "
        "are not comparable: read the guarantee column."
    )
    return pareto, note
