"""What a release guarantees, as data.

A mechanism never *claims* privacy in prose; its ``guarantee`` property returns one of these
immutable records, computed from the mechanism's actual parameters. Accountants (the ledger)
compose records; reports print them beside the attack results.

* :class:`ApproxDP` -- (epsilon, delta) local DP for a stated neighbouring relation.
* :class:`PureDP` -- epsilon local DP (delta = 0).
* :class:`MetricDP` -- epsilon per unit of a named metric (d_X privacy), with the plain
  LDP it implies on a bounded input domain listed in ``implied``.
* :class:`NoGuarantee` -- the parameters give no formal guarantee; ``reason`` says why.

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
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "ApproxDP",
    "Guarantee",
    "MetricDP",
    "NoGuarantee",
    "PureDP",
    "guarantee_from_dict",
]


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

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0) or not (0 <= self.delta <= 1):
            raise ValueError(
                f"invalid (epsilon, delta), got epsilon={self.epsilon!r}, delta={self.delta!r}."
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

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0):
            raise ValueError(f"epsilon must be >= 0, got epsilon={self.epsilon!r}.")

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

    def describe(self) -> str:
        s = f"{_g(self.epsilon)}-d_X privacy per unit of {self.metric} distance"
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
    for k in ("epsilon", "delta"):
        if k in data and data[k] is not None:
            data[k] = float(data[k]) if not math.isinf(float(data[k])) else math.inf
    return _KINDS[kind](**data)
