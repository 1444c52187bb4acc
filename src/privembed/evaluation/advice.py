"""Advice on a setting: what it costs in expectation, and the smallest epsilon that is useful.

Three questions an engineer asks before releasing vectors, answered from theory where a closed
form exists and by measurement otherwise:

* :func:`setting_note` -- *what does this setting do?* The expected mean cosine between a
  protected vector and its original (closed form, :mod:`privembed.core.theory`) and one-line notes
  when it is below a useful level (:data:`USEFUL_COSINE`) or when the guarantee is vacuous
  (:data:`VACUOUS_LDP_EPSILON`, :data:`VACUOUS_DELTA`). ``protect`` and ``index`` print it.
* :func:`epsilon_for_cosine` / :func:`theory_grid` -- *where is the transition?* The epsilon at
  which the expected cosine reaches a target; ``evaluate``'s default grid spans expected
  cosines 0.1 to 0.9 for the data's dimension (:data:`DEFAULT_COSINES`).
* :func:`advise` -- *which is the smallest epsilon that meets my utility target, and what do
  the attacks get there?* Per mechanism: the closed form where one exists (mean cosine of the
  Gaussian, Laplace and Purkayastha mechanisms), checked by measurement, else bisection on
  measurements; then the guarantee at that epsilon and the attacks' results against the attack
  ceiling -- or the honest answer that no epsilon meets both, with the frontier on each side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.rng import spawn
from ..release.setting import (
    USEFUL_COSINE,
    VACUOUS_DELTA,
    VACUOUS_LDP_EPSILON,
    SettingNote,
    expected_cosine,
    implied_ldp,
    setting_note,
)
from .privacy import CellRelease, StrengthCheck, run_on_plain
from .recommend import (
    REID_CHANCE_MULTIPLE,
    Floor,
    ceilings_from,
    is_linkability,
)
from .sweep import SweepConfig, baseline_stream, cell_streams
from .utility import UtilityEvaluator

__all__ = [
    "DEFAULT_COSINES",
    "USEFUL_COSINE",
    "VACUOUS_DELTA",
    "VACUOUS_LDP_EPSILON",
    "Advice",
    "MechanismAdvice",
    "SettingNote",
    "advise",
    "epsilon_for_cosine",
    "implied_ldp",
    "setting_note",
    "theory_grid",
]

#: Expected cosines spanned by ``evaluate``'s default epsilon grid (the whole transition from
#: "mostly noise" to "mostly signal").
DEFAULT_COSINES = (0.1, 0.3, 0.5, 0.7, 0.9)

_LO, _HI = 1e-3, 1e7  # epsilon range searched


# ---------------------------------------------------------------------------------------------
# one setting
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# theory: the epsilon at a target cosine
# ---------------------------------------------------------------------------------------------


def _x_param(name: str) -> str:
    return _mechanism_class(name).privacy_parameter


def _mechanism_class(name: str) -> Any:
    from ..mechanisms import MECHANISMS

    if name not in MECHANISMS:
        opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
        raise ValueError(f"mechanism must be one of {opts}, got mechanism={name!r}.")
    return MECHANISMS[name]


def _bisect_log(
    f: Callable[[float], bool], lo: float, hi: float, *, rel: float, increasing: bool = True
) -> float | None:
    """Smallest x in [lo, hi] (log scale) with f(x) True, for f monotone (False...True when
    ``increasing``, else True...False: then the largest x with f True). None if none."""
    if increasing:
        if not f(hi):
            return None
        if f(lo):
            return lo
    else:
        if not f(lo):
            return None
        if f(hi):
            return hi
    a, b = math.log(lo), math.log(hi)
    while b - a > math.log1p(rel):
        mid = 0.5 * (a + b)
        ok = f(math.exp(mid))
        if ok == increasing:
            b = mid
        else:
            a = mid
    return math.exp(b if increasing else a)


def epsilon_for_cosine(
    mechanism: str,
    target: float,
    dim: int,
    *,
    params: Mapping[str, Any] | None = None,
    rel: float = 1e-4,
) -> float | None:
    """The parameter at which a mechanism's expected mean cosine equals ``target`` (closed form).

    For ``empirical`` the parameter is sigma (the largest sigma reaching ``target``); for the
    others epsilon (the smallest). Found by bisection on the closed form
    (:func:`~privembed.core.theory.expected_cosine_gaussian`, ``_laplace``, ``_purkayastha``), which
    increases with epsilon.

    Returns
    -------
    float or None
        None when the mechanism has no closed form (``mahalanobis``, ``projection``) or no
        parameter in [1e-3, 1e7] reaches ``target``.

    Examples
    --------
    >>> eps = epsilon_for_cosine("laplace", 0.5, 384)
    >>> from privembed.core.theory import expected_cosine_laplace
    >>> round(expected_cosine_laplace(eps, 384), 3)
    0.5
    """
    target = check_real("target", target, gt=0, lt=1)
    dim = check_int("dim", dim, ge=2)
    extra = dict(params or {})
    if _mechanism_class(mechanism).needs("delta"):
        extra.setdefault("delta", 1e-5)
    xp = _x_param(mechanism)

    def cos(v: float) -> float | None:
        return expected_cosine(SweepConfig(mechanism, {**extra, xp: v}).build(), dim)

    if cos(1.0) is None:
        return None
    lo, hi = (1e-6, 1e3) if xp == "sigma" else (_LO, _HI)
    return _root_log(lambda v: cos(v) or 0.0, target, lo, hi, rel=rel, increasing=xp != "sigma")


def _root_log(
    f: Callable[[float], float],
    target: float,
    lo: float,
    hi: float,
    *,
    rel: float,
    increasing: bool,
) -> float | None:
    """Where a continuous monotone ``f`` crosses ``target`` on [lo, hi] (Brent's method on log
    x), returned on the side where ``f >= target``; None if ``f`` never reaches ``target``."""
    from scipy.optimize import brentq

    a, b = math.log(lo), math.log(hi)
    fa, fb = f(lo) - target, f(hi) - target
    if increasing:
        if fb < 0:
            return None
        if fa >= 0:
            return lo
    else:
        if fa < 0:
            return None
        if fb >= 0:
            return hi
    xtol = math.log1p(rel) / 2
    t = brentq(lambda u: f(math.exp(u)) - target, a, b, xtol=xtol)
    for _ in range(50):  # step to the side that meets the target
        if f(math.exp(t)) >= target:
            return math.exp(t)
        t = t + xtol if increasing else t - xtol
    return math.exp(t)


def _round(v: float, digits: int = 2) -> float:
    if v == 0 or not math.isfinite(v):
        return v
    return float(f"{v:.{digits}g}")


def theory_grid(
    mechanism: str,
    dim: int,
    *,
    cosines: Sequence[float] = DEFAULT_COSINES,
    params: Mapping[str, Any] | None = None,
    X: Any = None,
    seed: int = 0,
) -> list[float]:
    """Parameter values at which the expected mean cosine is each of ``cosines`` (2 digits).

    From the closed form where one exists; otherwise (``mahalanobis``, ``projection``) by
    bisection on the mean cosine *measured* on up to 256 rows of ``X`` (required then).

    Examples
    --------
    >>> theory_grid("gaussian", 384, cosines=(0.1, 0.5, 0.9))   # default: 0.1, 0.3, ..., 0.9
    [24.0, 350.0, 3600.0]
    """
    out = []
    for c in cosines:
        v = epsilon_for_cosine(mechanism, c, dim, params=params, rel=1e-3)
        if v is None:
            if X is None:
                raise ValueError(
                    f"mechanism {mechanism!r} has no closed form for the expected cosine; give "
                    "the embeddings (X=...) to measure it."
                )
            v = _measured_parameter(X, mechanism, "mean_cosine", c, params or {}, seed=seed)
        if v is None:
            raise DataError(f"no {_x_param(mechanism)} of {mechanism} reaches mean cosine {c}.")
        out.append(_round(v))
    vals = sorted(set(out), reverse=_x_param(mechanism) == "sigma")
    return vals


def _measured_parameter(
    X: Any,
    mechanism: str,
    metric: str,
    target: float,
    params: Mapping[str, Any],
    *,
    seed: int,
    evaluator: UtilityEvaluator | None = None,
    rows: int = 256,
    rel: float = 0.01,
) -> float | None:
    """Bisection on one measured release per probe (the same seed at every probe, so that the
    measured curve is as monotone as the noise law allows)."""
    A, _ = check_embeddings(X, name="X")
    A = np.asarray(A)
    if evaluator is None:
        if A.shape[0] > rows:
            A = A[np.sort(spawn(seed, 1)[0].choice(A.shape[0], rows, replace=False))]
        evaluator = UtilityEvaluator(A, n_queries=None, neighbours=min(10, A.shape[0] - 1))
    xp = _x_param(mechanism)

    def ok(v: float) -> bool:
        m = SweepConfig(mechanism, {**params, xp: v}).build()
        return evaluator.evaluate(m.privatize(evaluator.X, rng=seed), m)[metric] >= target

    if xp == "sigma":
        return _bisect_log(ok, 1e-6, 1e3, rel=rel, increasing=False)
    return _bisect_log(ok, _LO, _HI, rel=rel)


# ---------------------------------------------------------------------------------------------
# advise
# ---------------------------------------------------------------------------------------------


@dataclass
class MechanismAdvice:
    """The answer for one mechanism.

    Attributes
    ----------
    mechanism : str
    parameter : str
        ``"epsilon"`` (``"sigma"`` for ``empirical``).
    value : float or None
        The smallest epsilon meeting the utility target (None: none up to 1e7 does).
    method : str
        ``"closed form"`` (checked by measurement) or ``"bisection on measurements"``.
    config : dict or None
        The configuration at ``value``.
    guarantee, guarantee_short : str
    measured : dict
        Means over ``runs`` releases at ``value``: every utility and attack column.
    meets_target, meets_ceiling : bool
    failed : list of str
        The ceilings missed at ``value``.
    attack_side : dict or None
        When the ceiling is missed: the largest epsilon meeting it (``value``), with its
        guarantee and measured means -- the other side of the frontier.
    """

    mechanism: str
    parameter: str
    value: float | None
    method: str
    config: dict[str, Any] | None = None
    guarantee: str = ""
    guarantee_short: str = ""
    measured: dict[str, float] = field(default_factory=dict)
    meets_target: bool = False
    meets_ceiling: bool = False
    failed: list[str] = field(default_factory=list)
    attack_side: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None and self.meets_target and self.meets_ceiling

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "parameter": self.parameter,
            "value": self.value,
            "method": self.method,
            "config": self.config,
            "guarantee": self.guarantee,
            "guarantee_short": self.guarantee_short,
            "measured": self.measured,
            "meets_target": self.meets_target,
            "meets_ceiling": self.meets_ceiling,
            "meets_both": self.ok,
            "failed_ceilings": self.failed,
            "attack_side": self.attack_side,
        }


@dataclass
class Advice:
    """What :func:`advise` found: one :class:`MechanismAdvice` per mechanism."""

    target: Floor
    ceilings: list[Floor]
    checks: list[StrengthCheck]
    mechanisms: list[MechanismAdvice]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def meeting_both(self) -> list[MechanismAdvice]:
        return [m for m in self.mechanisms if m.ok]

    def sentence(self) -> str:
        """One plain sentence: the answer, or that no epsilon meets both."""
        ceiling = " and ".join(f.text() for f in self.ceilings) or "no attack ceiling"
        good = self.meeting_both
        if good:
            parts = [
                f"{m.mechanism} {m.parameter} = {m.value:.3g} ({m.guarantee_short})" for m in good
            ]
            return (
                f"Smallest setting meeting {self.target.text()} with the attacks under the "
                f"ceiling ({ceiling}): " + "; ".join(parts) + "."
            )
        if not self.ceilings:
            return f"No setting meets {self.target.text()} for any mechanism tried."
        return (
            f"No setting meets both {self.target.text()} and the attack ceiling ({ceiling}) "
            "for any mechanism tried: where the utility target is met, the attacks succeed "
            "above the ceiling."
        )

    def lines(self) -> list[str]:
        """What ``privembed advise --plain-only`` prints: the attack checks, one line per
        reported point (labelled by what was measured there, never by what was searched for),
        and :meth:`sentence`."""
        out = [f"attack check: {c.text()}" for c in self.checks]
        cols = [self.target.metric, *dict.fromkeys(f.metric for f in self.ceilings)]
        runs = self.settings.get("runs", 1)
        out.append(
            f"Smallest setting meeting {self.target.text()} (means over {runs} release{'s' if runs != 1 else ''}):"
        )
        for m in self.mechanisms:
            if m.value is None:
                out.append(f"- {m.mechanism}: no {m.parameter} up to 1e7 meets the target")
                continue
            label = (
                "smallest meeting the target"
                if m.meets_target
                else "largest tried, short of the target"
            )
            out.append(
                f"- {m.mechanism}: {label}: {m.parameter} = {m.value:.4g} "
                f"({m.guarantee_short}); {_values(m.measured, cols)}; meets: "
                f"{_meets(m.meets_target, m.meets_ceiling)}"
            )
            side = m.attack_side
            if side is not None:
                meas = side["measured"]
                hit = self.target.ok(meas.get(self.target.metric, math.nan))
                under = bool(side["meets_ceiling"])
                label = (
                    "largest under the ceiling"
                    if under
                    else f"under the ceiling on one release, over it on {runs}"
                )
                out.append(
                    f"  {label}: {m.parameter} = {side['value']:.4g} "
                    f"({side['guarantee_short']}); {_values(meas, cols)}; meets: "
                    f"{_meets(hit, under)}"
                )
        out.append(self.sentence())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.sentence(),
            "target": {
                "metric": self.target.metric,
                "op": self.target.op,
                "value": self.target.value,
            },
            "ceilings": [
                {"metric": f.metric, "op": f.op, "value": f.value, "note": f.note}
                for f in self.ceilings
            ],
            "attack_checks": [c.to_dict() for c in self.checks],
            "mechanisms": [m.to_dict() for m in self.mechanisms],
            "settings": self.settings,
        }


def _values(measured: Mapping[str, float], cols: Sequence[str]) -> str:
    return ", ".join(f"{c} {measured.get(c, math.nan):.3f}" for c in cols)


def _meets(target: bool, ceiling: bool) -> str:
    """What a point meets, in words that are true of it."""
    return {
        (True, True): "target and ceiling",
        (True, False): "target only",
        (False, True): "ceiling only",
    }.get((target, ceiling), "neither")


def _mean_measure(
    X: Any,
    cfg: SweepConfig,
    *,
    runs: int,
    seed: int,
    evaluator: UtilityEvaluator,
    attacks: Sequence[Any],
) -> dict[str, float]:
    """Means over ``runs`` releases (the sweep's streams) of every utility and attack column."""
    mech = cfg.build()
    sums: dict[str, list[float]] = {}
    for run in range(runs):
        noise, attack_rng = cell_streams(seed, cfg, run, runs)
        Y = mech.privatize(X, rng=noise)
        vals: dict[str, float] = dict(evaluator.evaluate(Y, mech))
        rel = CellRelease(mech, X, Y, attack_rng, {"label": cfg.label, "run": run})
        for m in attacks:
            vals.update(m(rel))
        for k, v in vals.items():
            if v is not None and math.isfinite(float(v)):
                sums.setdefault(k, []).append(float(v))
    return {k: float(np.mean(v)) for k, v in sums.items()}


def advise(
    X: Any,
    *,
    target: Floor,
    mechanisms: Sequence[str] = ("gaussian", "laplace", "purkayastha"),
    params: Mapping[str, Mapping[str, Any]] | None = None,
    attacks: Sequence[Any] = (),
    ceilings: Sequence[Floor] | None = None,
    reid_multiple: float = REID_CHANCE_MULTIPLE,
    runs: int = 3,
    seed: int = 0,
    n_queries: int | None = 2000,
    evaluator: UtilityEvaluator | None = None,
    on_step: Callable[[str], None] | None = None,
) -> Advice:
    """The smallest epsilon per mechanism meeting a utility target, and the attacks there.

    Parameters
    ----------
    X : array_like, shape (n, d)
        The embeddings to protect.
    target : Floor
        A utility floor, e.g. ``Floor("mean_cosine", ">=", 0.5)`` or
        ``Floor("knn_overlap@10", ">=", 0.5)`` (never a linkability column).
    mechanisms : sequence of str
        Registry names; ``mahalanobis`` needs ``params={"mahalanobis": {"profile": path}}``.
    params : dict, optional
        Extra parameters per mechanism (e.g. ``{"gaussian": {"delta": 1e-6}}``).
    attacks : sequence of privacy metrics
        E.g. ``[Linkage(), TokenLeakage(...)]``; each is first checked on the unprotected
        embeddings, and only attacks that beat chance set a ceiling.
    ceilings : sequence of Floor, optional
        Attack ceilings; default from the attacks (reid@1 <= ``reid_multiple`` x chance,
        token leakage within the blind attacker's interval).
    runs : int
        Releases averaged at every reported point.
    seed : int
        Seeds every release and attack (the sweep's streams, :func:`~.sweep.cell_streams`).

    Notes
    -----
    For the mean cosine of the Gaussian, Laplace and Purkayastha mechanisms the epsilon comes
    from the closed form (:func:`epsilon_for_cosine`) and is then measured; if the measured mean
    falls short it is raised by 1% steps until it meets the target. For any other metric or
    mechanism it is found by bisection on log epsilon with one measured release per probe (to
    1% relative precision), then measured with ``runs`` releases. The attack side assumes that
    attacks do not get weaker as epsilon grows: when the ceiling is missed at the smallest
    useful epsilon, no larger epsilon meets both, and the largest epsilon meeting the ceiling is
    found by bisection (one release per probe) to show the other side of the frontier.
    """
    say = on_step or (lambda _msg: None)
    A, _ = check_embeddings(X, name="X")
    A = np.asarray(A)
    runs = check_int("runs", runs, ge=1)
    seed = check_int("seed", seed, ge=0)
    _check_target(target)
    ev = evaluator if evaluator is not None else UtilityEvaluator(A, n_queries=n_queries)
    if target.metric not in ev.columns:
        raise ValueError(
            f"target metric {target.metric!r} is not measured (available: {', '.join(ev.columns)})."
        )
    extra = {k: dict(v) for k, v in (params or {}).items()}
    checks, base = _check_attacks(A, attacks, seed, say)
    if ceilings is None:
        ceil = ceilings_from(base, {c.attack: c for c in checks}, reid_multiple=reid_multiple)
    else:
        ceil = list(ceilings)
    advisor = _Advisor(A, target, ceil, attacks, runs=runs, seed=seed, evaluator=ev)
    return Advice(
        target=target,
        ceilings=ceil,
        checks=checks,
        mechanisms=[advisor.advise(name, extra.get(name, {}), say) for name in mechanisms],
        settings={"runs": runs, "seed": seed, "n": int(A.shape[0]), "d": int(A.shape[1])},
    )


def _check_target(target: Floor) -> None:
    """A utility floor (op ``>=``) is accepted; anything else, a linkability floor included, not."""
    if not isinstance(target, Floor) or target.op != ">=":
        raise ValueError(f"target must be a Floor with op '>=', got target={target!r}.")
    if is_linkability(target.metric):
        raise ValueError(
            f"{target.metric} is the re-identification rate, not a utility; target a utility "
            "metric (mean_cosine, knn_overlap@10, sts_pearson, ndcg@10)."
        )


def _check_attacks(
    A: Any, attacks: Sequence[Any], seed: int, say: Callable[[str], None]
) -> tuple[list[StrengthCheck], dict[str, float]]:
    """Every attack on the unprotected embeddings: the strength checks and the columns there."""
    checks: list[StrengthCheck] = []
    base: dict[str, float] = {}
    if attacks:
        say("checking the attacks on the unprotected embeddings")
        checks, columns = run_on_plain(A, attacks, baseline_stream(seed))
        for got in columns:
            base.update({k: float(v) for k, v in got.items()})
    return checks, base


@dataclass
class _Advisor:
    """What the search of every mechanism shares: the data, the target, the ceilings, the
    attacks and the measurement settings."""

    A: Any
    target: Floor
    ceilings: Sequence[Floor]
    attacks: Sequence[Any]
    runs: int
    seed: int
    evaluator: UtilityEvaluator

    def advise(
        self, name: str, params: Mapping[str, Any], say: Callable[[str], None]
    ) -> MechanismAdvice:
        """One mechanism's smallest useful value, the attacks there, and the other side of the
        frontier when they miss the ceiling."""
        p = dict(params)
        if _mechanism_class(name).needs("delta"):
            p.setdefault("delta", 1e-5)
        xp = _x_param(name)
        say(f"{name}: searching the smallest {xp} with {self.target.text()}")
        value, method = self._first_value(name, p)
        if value is None:
            return MechanismAdvice(name, xp, None, method)
        value = self._meet_target(name, p, xp, value)
        cfg = SweepConfig(name, {**p, xp: value})
        say(f"{name}: measuring the attacks at {xp} = {value:.4g}")
        measured = self._measure(cfg, self.attacks)
        g = cfg.build().guarantee
        failed = [f.text() for f in self.ceilings if not f.ok(measured.get(f.metric, math.nan))]
        adv = MechanismAdvice(
            mechanism=name,
            parameter=xp,
            value=value,
            method=method,
            config=cfg.to_dict(),
            guarantee=g.describe(),
            guarantee_short=g.short(),
            measured=measured,
            meets_target=measured.get(self.target.metric, -math.inf) >= self.target.value,
            meets_ceiling=not failed,
            failed=failed,
        )
        if failed:
            adv.attack_side = self._attack_side(name, xp, p, value)
        return adv

    def _first_value(self, name: str, p: Mapping[str, Any]) -> tuple[float | None, str]:
        """The first candidate and how it was found: the closed form for the mean cosine where
        one exists, else bisection on measurements (None: no value meets the target)."""
        target = self.target
        if target.metric == "mean_cosine":
            value = epsilon_for_cosine(name, target.value, self.A.shape[1], params=p)
            if value is not None:
                return value, "closed form (expected mean cosine), checked by measurement"
        value = _measured_parameter(
            self.A, name, target.metric, target.value, p, seed=self.seed, evaluator=self.evaluator
        )
        return value, "bisection on measurements"

    def _meet_target(self, name: str, p: Mapping[str, Any], xp: str, value: float) -> float:
        """``value``, or the first 1% step towards less noise whose mean over ``runs``
        releases meets the target (at most 50 steps)."""
        for _ in range(50):
            cfg = SweepConfig(name, {**p, xp: value})
            measured = self._measure(cfg, [])
            if measured.get(self.target.metric, -math.inf) >= self.target.value:
                break
            value = value / 1.01 if xp == "sigma" else value * 1.01
        return float(value)

    def _measure(
        self, cfg: SweepConfig, attacks: Sequence[Any], runs: int | None = None
    ) -> dict[str, float]:
        """Means over ``runs`` releases of ``cfg`` (default: the advisor's) of every utility
        and attack column."""
        runs = self.runs if runs is None else runs
        return _mean_measure(
            self.A, cfg, runs=runs, seed=self.seed, evaluator=self.evaluator, attacks=attacks
        )

    def _attack_side(
        self, name: str, xp: str, params: Mapping[str, Any], useful: float
    ) -> dict[str, Any] | None:
        """The largest parameter (below the useful one) at which the attacks meet the
        ceilings."""

        def meets_ceilings(measured: Mapping[str, float]) -> bool:
            return all(f.ok(measured.get(f.metric, math.nan)) for f in self.ceilings)

        def ok(v: float) -> bool:
            cfg = SweepConfig(name, {**params, xp: v})
            return meets_ceilings(self._measure(cfg, self.attacks, runs=1))

        if xp == "sigma":
            v = _bisect_log(ok, useful, 1e3, rel=0.05, increasing=True)
        else:
            v = _bisect_log(ok, _LO, useful, rel=0.05, increasing=False)
        if v is None:
            return None
        # the bisection probes one release; the point is reported over ``runs``: step away from
        # the useful side (5% a step, at most 5 steps) until the means are under the ceiling too
        for _ in range(6):
            cfg = SweepConfig(name, {**params, xp: v})
            measured = self._measure(cfg, self.attacks)
            if meets_ceilings(measured):
                break
            v = v * 1.05 if xp == "sigma" else v / 1.05
        g = cfg.build().guarantee
        return {
            "value": float(v),
            "config": cfg.to_dict(),
            "guarantee": g.describe(),
            "guarantee_short": g.short(),
            "measured": measured,
            "meets_ceiling": meets_ceilings(measured),
        }
