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
record's releases (PLD for the Gaussian part through ``dp-accounting``, basic composition for
the rest).

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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from ._optional import require

__all__ = [
    "ApproxDP",
    "Cost",
    "Guarantee",
    "MetricDP",
    "Neighbouring",
    "NoGuarantee",
    "PureDP",
    "UnsupportedGuarantee",
    "compose",
    "cost_of",
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

    def describe(self) -> str:  # pragma: no cover - overridden
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
    #: sigma / l2 sensitivity when the noise is Gaussian (tight PLD composition); else None
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

    def describe(self) -> str:
        s = f"({_g(self.epsilon)}, {_g(self.delta)})-LDP for {self.neighbouring}"
        return s + (f"; {self.note}" if self.note else "")

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

    def describe(self) -> str:
        s = f"{_g(self.epsilon)}-LDP (pure) for {self.neighbouring}"
        return s + (f"; {self.note}" if self.note else "")

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

    def describe(self) -> str:
        detail = self.metric[len(self.metric_name) :].strip()
        detail = detail.removeprefix("distance").strip()
        s = f"{_g(self.epsilon)}-d_X privacy per unit of {self.metric_name} distance"
        s += f" {detail}" if detail else ""
        if self.implied:
            s += " (implies " + "; ".join(g.describe() for g in self.implied) + ")"
        return s + (f"; {self.note}" if self.note else "")

    def short(self) -> str:
        s = f"{self.epsilon:.4g}-d_X({self.metric.split()[0]})"
        pure = [g for g in self.implied if isinstance(g, PureDP)]
        return s + (f" => {pure[0].short()}" if pure else "")


@dataclass(frozen=True)
class NoGuarantee(Guarantee):
    """No formal privacy guarantee follows from the parameters."""

    kind: ClassVar[str] = "none"
    reason: str = ""

    def describe(self) -> str:
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

    ``noise_multiplier`` set: a Gaussian release (composed tightly by PLD; ``epsilon`` and
    ``delta`` are then 0 here). Otherwise ``(epsilon, delta)`` compose by basic composition.
    """

    relation: Neighbouring
    epsilon: float
    delta: float
    noise_multiplier: float | None = None


def cost_of(g: Guarantee) -> Cost:
    """The :class:`Cost` of one release with guarantee ``g``.

    * :class:`ApproxDP` with a noise multiplier -> a Gaussian cost (PLD);
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
    privembed.accounting.UnsupportedGuarantee: a release with no formal guarantee (plain) cannot be accounted; the ledger records only mechanisms with a formal guarantee.
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


@lru_cache(maxsize=4096)
def _gaussian_epsilon(ratios: tuple[tuple[float, int], ...], delta: float) -> float:
    """epsilon at ``delta`` of composed Gaussian mechanisms (PLD accountant of dp-accounting)."""
    if not ratios:
        return 0.0
    if delta <= 0:
        return math.inf
    dpa = require("dp_accounting", "accounting", purpose="composing Gaussian releases")
    from dp_accounting import pld

    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    for ratio, count in ratios:
        acc.compose(dpa.GaussianDpEvent(noise_multiplier=ratio), count=count)
    return float(acc.get_epsilon(delta))


def compose(
    costs: Sequence[Cost], delta_target: float, *, counts: Sequence[int] | None = None
) -> tuple[float, float]:
    """(epsilon, delta) spent by a record's fresh releases, reported at total ``delta_target``.

    Gaussian releases compose by the PLD accountant at the delta left after the basic part;
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
    relations = {c.relation for c in costs}
    if len(relations) > 1:
        raise UnsupportedGuarantee(
            "releases of one record under different neighbouring relations "
            f"({', '.join(sorted(r.value for r in relations))}) do not compose into one guarantee."
        )
    eps_basic = sum(
        c.epsilon * n for c, n in zip(costs, reps, strict=True) if c.noise_multiplier is None
    )
    delta_basic = sum(
        c.delta * n for c, n in zip(costs, reps, strict=True) if c.noise_multiplier is None
    )
    gauss: Counter[float] = Counter()
    for c, n in zip(costs, reps, strict=True):
        if c.noise_multiplier is not None:
            gauss[c.noise_multiplier] += n
    if not gauss:
        return eps_basic, delta_basic
    delta_g = delta_target - delta_basic
    key = tuple(sorted((float(r), int(n)) for r, n in gauss.items()))
    eps_g = _gaussian_epsilon(key, delta_g) if delta_g > 0 else math.inf
    return eps_basic + eps_g, delta_target if delta_g > 0 else delta_basic
