"""What a release guarantees, as data.

A mechanism never *claims* privacy in prose; its ``guarantee`` property returns one of these
immutable records, computed from the mechanism's actual parameters. Accountants (the ledger)
compose records; reports print them beside the attack results.

* :class:`ApproxDP` -- (epsilon, delta) local DP for a stated neighbouring relation.
* :class:`PureDP` -- epsilon local DP (delta = 0).
* :class:`MetricDP` -- epsilon per unit of a named metric (d_X privacy), with the plain
  LDP it implies on a bounded input domain listed in ``implied``.
* :class:`NoGuarantee` -- the parameters give no formal guarantee; ``reason`` says why.

Each record also carries what *composition* needs, as dp_accounting's events do: the
neighbouring relation as a :class:`Neighbouring` value (never parsed from prose), and for
Gaussian noise the noise multiplier sigma / sensitivity. :func:`cost_of` turns a record into
the :class:`Cost` an accountant composes; it refuses records it cannot account
(:class:`UnsupportedGuarantee`) instead of guessing. :func:`compose` composes the costs of one
record's releases and :class:`Composition` keeps a running composition: Gaussian releases
compose *exactly* in closed form (k Gaussian mechanisms are one Gaussian mechanism with
mu = sqrt(sum 1/s_i^2), evaluated on [BW18]'s curve: O(1) per release, no PLD), the rest by
basic composition. ``tests/test_accounting.py`` cross-checks the closed form against
``dp-accounting``'s PLD and RDP accountants on a grid.

References
----------
.. [BW18] Balle, B. & Wang, Y.-X. (2018). Improving the Gaussian mechanism for differential
   privacy: analytical calibration and optimal denoising. ICML. Thm 8.

Examples
--------
>>> g = ApproxDP(epsilon=5.0, delta=1e-5, neighbouring="any two unit vectors (l2 sensitivity 2)")
>>> g.describe()
'(5, 1e-05)-LDP for any two unit vectors (l2 sensitivity 2)'
>>> guarantee_from_dict(g.to_dict()) == g
True
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from .theory import log_analytic_gaussian_delta

__all__ = [
    "ApproxDP",
    "Composition",
    "Cost",
    "Guarantee",
    "MetricDP",
    "Neighbouring",
    "NoGuarantee",
    "PureDP",
    "UnsupportedGuarantee",
    "compose",
    "cost_of",
    "exceeds_budget",
    "gaussian_epsilon",
    "guarantee_from_dict",
]


class Neighbouring(enum.StrEnum):
    """Which pairs of inputs a guarantee makes indistinguishable (composition needs it exact).

    * ``RECORD`` -- any two inputs of the mechanism's bounded input domain (unit vectors, or
      the unit ball): the whole record may change. Record-level local DP.
    * ``ATTRIBUTE`` -- inputs that differ in one coordinate by at most 1 (Kenthapadi et al.).
    * ``BOUNDED`` -- inputs within a stated l2 distance that is smaller than the domain's
      diameter (e.g. a Gaussian calibrated to sensitivity 1 on unit vectors).

    Guarantees for different relations do not compose into one number: a ledger refuses to mix
    them for one record.
    """

    RECORD = "record"
    ATTRIBUTE = "attribute"
    BOUNDED = "bounded"


class UnsupportedGuarantee(ValueError):
    """An accountant was given a guarantee it cannot compose (none, unknown kind, no relation)."""


def _g(x: float) -> str:
    return f"{x:.6g}"


@dataclass(frozen=True)
class Guarantee:
    """Base class of guarantee records."""

    kind: ClassVar[str] = "guarantee"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (inverse: :func:`guarantee_from_dict`)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                v = [x.to_dict() if isinstance(x, Guarantee) else x for x in v]
            elif isinstance(v, enum.Enum):
                v = v.value
            out[f.name] = v
        return out

    def describe(self) -> str:
        """One line: the statement (:meth:`_statement`), then ``; note`` when there is one."""
        note = getattr(self, "note", "")
        return self._statement() + (f"; {note}" if note else "")

    def _statement(self) -> str:  # pragma: no cover - overridden
        """What the guarantee states, without its note."""
        raise NotImplementedError

    def short(self) -> str:  # pragma: no cover - overridden
        """A compact one-line form for tables."""
        raise NotImplementedError

    @property
    def is_formal(self) -> bool:
        """Whether this record carries a formal privacy guarantee."""
        return True


@dataclass(frozen=True)
class ApproxDP(Guarantee):
    """(epsilon, delta) local differential privacy for a neighbouring relation."""

    kind: ClassVar[str] = "approx_dp"
    epsilon: float
    delta: float
    neighbouring: str = "any two inputs"
    note: str = ""
    relation: Neighbouring = Neighbouring.RECORD
    #: sigma / l2 sensitivity when the noise is Gaussian (exact composition); else None
    noise_multiplier: float | None = None

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0) or not (0 <= self.delta <= 1):
            raise ValueError(
                f"invalid (epsilon, delta), got epsilon={self.epsilon!r}, delta={self.delta!r}."
            )
        object.__setattr__(self, "relation", Neighbouring(self.relation))
        if self.noise_multiplier is not None and not (self.noise_multiplier > 0):
            raise ValueError(
                f"noise_multiplier must be > 0, got noise_multiplier={self.noise_multiplier!r}."
            )

    def _statement(self) -> str:
        return f"({_g(self.epsilon)}, {_g(self.delta)})-LDP for {self.neighbouring}"

    def short(self) -> str:
        return f"({self.epsilon:.3g}, {self.delta:.2g})-LDP"


@dataclass(frozen=True)
class PureDP(Guarantee):
    """Pure epsilon local differential privacy (delta = 0)."""

    kind: ClassVar[str] = "pure_dp"
    epsilon: float
    neighbouring: str = "any two inputs"
    note: str = ""
    relation: Neighbouring = Neighbouring.RECORD

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0):
            raise ValueError(f"epsilon must be >= 0, got epsilon={self.epsilon!r}.")
        object.__setattr__(self, "relation", Neighbouring(self.relation))

    def _statement(self) -> str:
        return f"{_g(self.epsilon)}-LDP (pure) for {self.neighbouring}"

    def short(self) -> str:
        return f"{self.epsilon:.4g}-LDP"


@dataclass(frozen=True)
class MetricDP(Guarantee):
    """Metric (d_X) privacy: output distributions of x and x' differ by at most
    ``exp(epsilon * d(x, x'))`` for the named metric ``d``.

    ``implied`` lists guarantees that follow on a bounded domain (e.g. pure LDP with
    epsilon times the domain's diameter)."""

    kind: ClassVar[str] = "metric_dp"
    epsilon: float
    metric: str = "l2"
    implied: tuple[Guarantee, ...] = field(default=())
    note: str = ""

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0):
            raise ValueError(f"epsilon must be >= 0, got epsilon={self.epsilon!r}.")

    @property
    def metric_name(self) -> str:
        """The metric's name without its details (``"l2"``, ``"Mahalanobis"``, ``"angular"``).

        Examples
        --------
        >>> MetricDP(1.0, "Mahalanobis distance ||Sigma^-1/2 (x - x')||").metric_name
        'Mahalanobis'
        >>> MetricDP(1.0, "angular (great-circle distance, radians)").metric_name
        'angular'
        """
        cuts = [i for i in (self.metric.find(" ("), self.metric.find(" distance")) if i > 0]
        return self.metric[: min(cuts)] if cuts else self.metric

    def _statement(self) -> str:
        detail = self.metric[len(self.metric_name) :].strip()
        detail = detail.removeprefix("distance").strip()
        s = f"{_g(self.epsilon)}-d_X privacy per unit of {self.metric_name} distance"
        s += f" {detail}" if detail else ""
        if self.implied:
            s += " (implies " + "; ".join(g.describe() for g in self.implied) + ")"
        return s

    def short(self) -> str:
        s = f"{self.epsilon:.4g}-d_X({self.metric.split()[0]})"
        pure = [g for g in self.implied if isinstance(g, PureDP)]
        return s + (f" => {pure[0].short()}" if pure else "")


@dataclass(frozen=True)
class NoGuarantee(Guarantee):
    """No formal privacy guarantee follows from the parameters."""

    kind: ClassVar[str] = "none"
    reason: str = ""

    def _statement(self) -> str:
        return "no formal guarantee" + (f": {self.reason}" if self.reason else "")

    def short(self) -> str:
        return "none"

    @property
    def is_formal(self) -> bool:
        return False


_KINDS: dict[str, type[Guarantee]] = {c.kind: c for c in (ApproxDP, PureDP, MetricDP, NoGuarantee)}


def guarantee_from_dict(d: dict[str, Any]) -> Guarantee:
    """Rebuild a guarantee record from :meth:`Guarantee.to_dict` output."""
    data = dict(d)
    kind = data.pop("kind", None)
    if kind not in _KINDS:
        raise ValueError(f"unknown guarantee kind, got kind={kind!r}.")
    if "implied" in data:
        data["implied"] = tuple(guarantee_from_dict(x) for x in data["implied"])
    for k in ("epsilon", "delta", "noise_multiplier"):
        if k in data and data[k] is not None:
            data[k] = float(data[k]) if not math.isinf(float(data[k])) else math.inf
    names = {f.name for f in dataclasses.fields(_KINDS[kind])}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} for guarantee kind {kind!r}.")
    return _KINDS[kind](**data)


# ---------------------------------------------------------------------------------------------
# composition
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """What one release costs a record, as an accountant composes it.

    ``noise_multiplier`` set: a Gaussian release (composed exactly, :class:`Composition`; ``epsilon`` and
    ``delta`` are then 0 here). Otherwise ``(epsilon, delta)`` compose by basic composition.
    """

    relation: Neighbouring
    epsilon: float
    delta: float
    noise_multiplier: float | None = None


def cost_of(g: Guarantee) -> Cost:
    """The :class:`Cost` of one release with guarantee ``g``.

    * :class:`ApproxDP` with a noise multiplier -> a Gaussian cost (exact composition);
    * :class:`ApproxDP` / :class:`PureDP` -> (epsilon, delta) for basic composition;
    * :class:`MetricDP` -> the pure LDP it implies on its bounded domain (listed in
      ``implied``); a metric guarantee without one cannot be charged per record.

    Raises
    ------
    UnsupportedGuarantee
        For :class:`NoGuarantee`, metric privacy without an implied LDP, or unknown kinds.

    Examples
    --------
    >>> cost_of(PureDP(2.0)).epsilon
    2.0
    >>> cost_of(NoGuarantee("plain"))
    Traceback (most recent call last):
    ...
    privembed.core.accounting.UnsupportedGuarantee: a release with no formal guarantee (plain) cannot be accounted; the ledger records only mechanisms with a formal guarantee.
    """
    if isinstance(g, ApproxDP):
        if g.noise_multiplier is not None:
            return Cost(g.relation, 0.0, 0.0, float(g.noise_multiplier))
        return Cost(g.relation, float(g.epsilon), float(g.delta))
    if isinstance(g, PureDP):
        return Cost(g.relation, float(g.epsilon), 0.0)
    if isinstance(g, MetricDP):
        pure = [x for x in g.implied if isinstance(x, PureDP)]
        if not pure:
            raise UnsupportedGuarantee(
                f"{g.describe()} implies no per-record LDP (no bounded input domain, e.g. "
                "input_norm='none'); the ledger cannot charge it -- normalise or clip inputs."
            )
        return cost_of(pure[0])
    if isinstance(g, NoGuarantee):
        why = f" ({g.reason})" if g.reason else ""
        raise UnsupportedGuarantee(
            f"a release with no formal guarantee{why} cannot be accounted; the ledger records "
            "only mechanisms with a formal guarantee."
        )
    raise UnsupportedGuarantee(f"unknown guarantee kind {g.kind!r}: cannot be accounted.")


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
    """log delta(epsilon) of the Gaussian mechanism with ``mu`` = sensitivity / sigma ([BW18])."""
    return log_analytic_gaussian_delta(1.0, epsilon, mu)


@lru_cache(maxsize=4096)
def gaussian_epsilon(mu: float, delta: float) -> float:
    r"""The exact epsilon at ``delta`` of a Gaussian mechanism with ``mu`` = sensitivity / sigma.

    .. math::
        \delta(\varepsilon) = \Phi\!\left(\frac{\mu}{2} - \frac{\varepsilon}{\mu}\right)
        - e^{\varepsilon}\,\Phi\!\left(-\frac{\mu}{2} - \frac{\varepsilon}{\mu}\right)

    ([BW18] Thm 8), solved for epsilon by Brent's method in log space and then rounded *up*
    until ``delta(epsilon) <= delta`` holds as computed: the value is never below the true
    epsilon. ``mu = 0`` (no Gaussian release) costs nothing; ``delta <= 0`` costs ``inf``.

    Examples
    --------
    >>> round(gaussian_epsilon(1.0, 1e-5), 4)       # noise multiplier 1
    4.3772
    >>> gaussian_epsilon(0.0, 1e-5), gaussian_epsilon(1.0, 0.0)
    (0.0, inf)
    """
    if not (mu >= 0) or math.isinf(mu):
        raise ValueError(f"mu must be finite and >= 0, got mu={mu!r}.")
    if mu == 0 or delta >= 1:
        return 0.0
    if not (delta > 0):
        return math.inf
    target = math.log(delta)
    if _log_gaussian_delta(mu, 0.0) <= target:
        return 0.0
    hi = max(1.0, mu * mu)
    while _log_gaussian_delta(mu, hi) > target:
        hi *= 2.0
    eps = float(
        optimize.brentq(
            lambda e: _log_gaussian_delta(mu, e) - target, 0.0, hi, xtol=1e-13, rtol=1e-14
        )
    )
    step = max(eps, 1.0) * 1e-15
    while _log_gaussian_delta(mu, eps) > target:  # round up: the bound must hold
        eps += step
        step *= 2.0
    return eps


def exceeds_budget(
    epsilon: Any, delta: Any, mu2: Any, budget_epsilon: float, budget_delta: float
) -> NDArray[np.bool_]:
    r"""Whether each composition (arrays of basic ``epsilon``, ``delta`` and Gaussian
    ``mu2``, as :class:`Composition`) exceeds the budget -- vectorised, and the same decision
    as ``Composition.at(budget_delta)`` against ``budget * (1 + 1e-12)``.

    The Gaussian part passes iff :math:`\delta_\mu(\varepsilon_B - \varepsilon_{basic}) \le
    \delta_B - \delta_{basic}` ([BW18] Thm 8; :math:`\delta_\mu(\varepsilon)` decreases in
    :math:`\varepsilon`), which needs no root-finding.

    Examples
    --------
    >>> exceeds_budget([1.0, 3.0], [0.0, 0.0], [0.0, 0.0], 2.0, 1e-5).tolist()
    [False, True]
    """
    eb = np.asarray(epsilon, dtype=np.float64)
    db = np.asarray(delta, dtype=np.float64)
    m2 = np.asarray(mu2, dtype=np.float64)
    tol = 1 + 1e-12
    e_cap, d_cap = budget_epsilon * tol, budget_delta * tol
    basic_over = (eb > e_cap) | (db > d_cap)
    gauss = m2 > 0
    delta_g = budget_delta - db
    room = e_cap - eb  # the epsilon left for the Gaussian part
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu = np.sqrt(np.where(gauss, m2, 1.0))
        e = np.where(np.isinf(room), 1e300, np.maximum(room, 0.0))
        a = mu / 2 - e / mu
        b = -mu / 2 - e / mu
        la = special.log_ndtr(a)
        diff = e + special.log_ndtr(b) - la  # < 0 where delta > 0
        log1mexp = np.where(diff > -math.log(2), np.log(-np.expm1(diff)), np.log1p(-np.exp(diff)))
        log_delta = np.where(diff < 0, la + log1mexp, -np.inf)
        gauss_over = (delta_g <= 0) | (room < 0) | (log_delta > np.log(np.maximum(delta_g, 1e-300)))
    if math.isinf(budget_epsilon):  # only delta is bounded: the basic test decides
        gauss_over = np.zeros_like(gauss)
    return np.asarray(basic_over | (gauss & gauss_over), dtype=np.bool_)


@dataclass(frozen=True)
class Composition:
    r"""Running composition of one record's (or subject's) fresh releases, in O(1) state.

    Basic composition for pure/approximate costs (epsilons add, deltas add) and, for Gaussian
    costs, the exact composition: the privacy loss of a Gaussian release with noise multiplier
    :math:`s` (sigma / sensitivity) is :math:`N(\mu^2/2, \mu^2)` with :math:`\mu = 1/s`, and
    losses of independent releases add, so :math:`k` Gaussian releases are *exactly* one
    Gaussian mechanism with :math:`\mu^2 = \sum_i 1/s_i^2` (its privacy curve is [BW18]'s at
    that :math:`\mu`). Adding a release is therefore O(1) -- no PLD is built, and nothing is
    recomputed from the history -- and :meth:`at` costs one root-finding (cached).

    Attributes
    ----------
    relation : Neighbouring or None
        The one neighbouring relation of the releases (``None``: no release yet).
    epsilon, delta : float
        Sums of the non-Gaussian releases' epsilons and deltas.
    mu2 : float
        :math:`\sum 1/s_i^2` over the Gaussian releases.
    releases : int
        Releases composed.

    Examples
    --------
    >>> g = Cost(Neighbouring.RECORD, 0.0, 0.0, 1.0)
    >>> c = Composition().add(g).add(g, 3)          # four releases at noise multiplier 1 ...
    >>> c.at(1e-5) == Composition().add(Cost(Neighbouring.RECORD, 0.0, 0.0, 0.5)).at(1e-5)
    True
    """

    relation: Neighbouring | None = None
    epsilon: float = 0.0
    delta: float = 0.0
    mu2: float = 0.0
    releases: int = 0

    def _relation(self, other: Neighbouring | None) -> Neighbouring | None:
        if other is None or self.relation is None or other == self.relation:
            return self.relation if other is None else other
        pair = ", ".join(sorted((self.relation.value, other.value)))
        raise UnsupportedGuarantee(
            f"releases of one record under different neighbouring relations ({pair}) do not "
            "compose into one guarantee."
        )

    def add(self, cost: Cost, n: int = 1) -> Composition:
        """This composition and ``n`` more releases of ``cost``."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got n={n!r}.")
        if n == 0:
            return self
        rel = self._relation(cost.relation)
        if cost.noise_multiplier is not None:
            s = float(cost.noise_multiplier)
            return Composition(rel, self.epsilon, self.delta, self.mu2 + n / (s * s),
                               self.releases + n)  # fmt: skip
        return Composition(rel, self.epsilon + n * cost.epsilon, self.delta + n * cost.delta,
                           self.mu2, self.releases + n)  # fmt: skip

    def merge(self, other: Composition) -> Composition:
        """The composition of both sets of releases."""
        rel = self._relation(other.relation)
        return Composition(rel, self.epsilon + other.epsilon, self.delta + other.delta,
                           self.mu2 + other.mu2, self.releases + other.releases)  # fmt: skip

    def at(self, delta_target: float) -> tuple[float, float]:
        """(epsilon, delta) spent, reported at total ``delta_target``: the Gaussian part at
        the delta the basic part leaves (as :func:`compose`)."""
        if self.mu2 == 0:
            return self.epsilon, self.delta
        delta_g = delta_target - self.delta
        if not (delta_g > 0):
            return math.inf, self.delta
        return self.epsilon + gaussian_epsilon(math.sqrt(self.mu2), delta_g), delta_target


def compose(
    costs: Sequence[Cost], delta_target: float, *, counts: Sequence[int] | None = None
) -> tuple[float, float]:
    """(epsilon, delta) spent by a record's fresh releases, reported at total ``delta_target``.

    Gaussian releases compose exactly (:class:`Composition`) at the delta left after the basic part;
    the rest by basic composition (epsilons add, deltas add); the two parts add. ``counts``
    (same length as ``costs``) repeats each cost that many times.

    Raises
    ------
    UnsupportedGuarantee
        If the costs mix neighbouring relations (they do not compose into one guarantee).

    Examples
    --------
    >>> compose([Cost(Neighbouring.RECORD, 1.0, 0.0)] * 3, 1e-5)
    (3.0, 0.0)
    """
    reps = list(counts) if counts is not None else [1] * len(costs)
    if len(reps) != len(costs):
        raise ValueError(f"counts has {len(reps)} entries but there are {len(costs)} costs.")
    total = Composition()
    for c, n in zip(costs, reps, strict=True):
        total = total.add(c, int(n))
    return total.at(delta_target)
