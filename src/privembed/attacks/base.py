"""The common result of an attack (issue 25.3): its headline number against a blind baseline.

Attacks differ in what they fit on (texts, labels, candidate pools) and in how they are trained
(``fit`` on plain auxiliary vectors, ``fit_adaptive`` on auxiliary vectors protected by the
mechanism under test), but every score they report means something only against what an
attacker without the vectors gets -- its *blind baseline* -- and with an interval. A report
that implements :class:`ScoredReport` gives that as one :class:`AttackResult`:

============================  ===============  =============================================
report                        statistic        blind baseline (interval of the excess)
============================  ===============  =============================================
``LinkageReport``             ``reid@k``       ``k / candidates`` (Wilson interval)
``TokenInferenceReport``      ``leakage``      token-frequency attacker (paired bootstrap)
``AttributeReport``           ``auc``          0.5 (DeLong interval)
``FingerprintReport``         ``accuracy``     the most common concept (Wilson interval)
``ReconstructionReport``      ``token_f1``     reconstructions paired with other texts
                                               (paired bootstrap): the inversion attacks
``AveragingReport``           ``cosine@N``     a single release, no averaging: what N
                                               re-releases add (paired t over records)
============================  ===============  =============================================

``InversionReport`` (:func:`~privembed.attacks.score_reconstructions`) has no ``result()``: its
leakage of sensitive tokens is a descriptive column beside an inversion attack's evidence, which
is that attack's ``ReconstructionReport`` (``attack inversion`` prints both).

The strength check of an attack is then one rule for all: run it on *unprotected* vectors; it
is evidence about protection only when :attr:`AttackResult.beats_blind` holds there
(:mod:`privembed.evaluation.threats` applies it).

Examples
--------
>>> r = AttackResult("linkage", "reid@1", 0.9, 0.01, 0.85, 0.93)
>>> r.beats_blind, [round(x, 2) for x in r.excess]
(True, [0.89, 0.85, 0.93])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_real
from ..core.rng import as_generator
from ._common import protect_copies

__all__ = ["AdaptiveFit", "AttackResult", "ScoredReport", "TrainedAttack", "attacker_split"]


@dataclass(frozen=True)
class AttackResult:
    """An attack's headline number, its blind baseline, and the 95% interval of the excess.

    Attributes
    ----------
    attack : str
    statistic : str
    value : float
    blind : float
        What an attacker without what the attack exploits gets: without the vectors (for the
        averaging attack, which asks what re-releases add: with a single release).
    excess_low, excess_high : float
        95% interval of ``value - blind``.
    method : str
        How the interval was made.
    """

    attack: str
    statistic: str
    value: float
    blind: float
    excess_low: float
    excess_high: float
    method: str = ""

    def __post_init__(self) -> None:
        for name in ("value", "blind", "excess_low", "excess_high"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or math.isnan(float(v)):
                raise ValueError(f"{name} must be a number, got {name}={v!r}.")
        if self.excess_low > self.excess_high:
            raise ValueError(
                f"excess_low must be <= excess_high, got excess_low={self.excess_low!r}, "
                f"excess_high={self.excess_high!r}."
            )

    @property
    def excess(self) -> tuple[float, float, float]:
        """(value - blind, lower end, upper end)."""
        return self.value - self.blind, self.excess_low, self.excess_high

    @property
    def beats_blind(self) -> bool:
        """Whether the whole interval of the excess is above 0."""
        return bool(self.excess_low > 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "beats_blind": self.beats_blind}


@runtime_checkable
class ScoredReport(Protocol):
    """A report that states its headline number against its blind baseline."""

    def result(self) -> AttackResult: ...


@runtime_checkable
class TrainedAttack(Protocol):
    """An attack that learns from the attacker's own data: ``fit`` on plain auxiliary vectors,
    ``fit_adaptive`` on auxiliary vectors protected by the mechanism under test (the attacker
    who knows the mechanism, [T26] App. I.3). Its scores become a :class:`ScoredReport`, whose
    ``result()`` run on unprotected vectors is the strength check. The token, GEIA, transformer
    inversion and attribute attacks are such attacks (a test checks it)."""

    def fit(self, *args: Any, **kwargs: Any) -> Any: ...

    def fit_adaptive(self, *args: Any, **kwargs: Any) -> Any: ...


def attacker_split(
    n: int, aux_fraction: float = 0.5, seed: Any = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The records an attacker owns (its training set) and the records it attacks, both sorted:
    a random ``aux_fraction`` of ``n`` under the randomness policy
    (:func:`privembed.core.rng.as_generator`; ``seed`` None draws fresh entropy). The one split
    of the sweeps, ``evaluate`` and the ``attack`` commands. Each side needs at least two
    records: an attack trained on one record, or scored on one, is evidence of nothing.

    Examples
    --------
    >>> aux, tgt = attacker_split(10, 0.3, seed=1)
    >>> len(aux), len(tgt), sorted([*aux, *tgt]) == list(range(10))
    (3, 7, True)
    >>> attacker_split(3, 0.5, seed=0)
    Traceback (most recent call last):
    ...
    ValueError: 3 records are too few to split into attacker and target records (aux_fraction=0.5 leaves 2 and 1; each side needs at least 2).
    """
    check_real("aux_fraction", aux_fraction, gt=0, lt=1)
    order = as_generator(seed).permutation(n)
    n_aux = round(aux_fraction * n)
    if n_aux < 2 or n - n_aux < 2:
        raise ValueError(
            f"{n} records are too few to split into attacker and target records "
            f"(aux_fraction={aux_fraction:g} leaves {n_aux} and {n - n_aux}; each side needs "
            "at least 2)."
        )
    return np.sort(order[:n_aux]), np.sort(order[n_aux:])


class AdaptiveFit:
    """``fit_adaptive`` for an attack trained by ``fit(targets, embeddings, rng=, on_epoch=)``:
    the adaptive attacker ([T26] App. I.3) protects its auxiliary embeddings with the very
    mechanism and parameters it attacks -- ``n_copies`` fresh releases of each (data
    augmentation) -- and fits on those. Written once here; an attack whose targets need
    preparing (token sets) overrides :meth:`_adaptive_targets`.
    """

    fit: Callable[..., Any]

    def _adaptive_targets(self, texts: Iterable[Any]) -> list[Any]:
        return list(texts)

    def fit_adaptive(
        self,
        texts: Iterable[Any],
        embeddings: Any,
        mechanism: Any,
        *,
        n_copies: int = 1,
        rng: Any = None,
        on_epoch: Callable[[int], None] | None = None,
    ) -> Any:
        """Train on auxiliary embeddings protected by ``mechanism`` (the adaptive attacker)."""
        gen = as_generator(rng)
        targets = self._adaptive_targets(texts)
        Xp = protect_copies(mechanism, embeddings, n_copies, rng=gen)
        return self.fit(targets * n_copies, Xp, rng=gen, on_epoch=on_epoch)
