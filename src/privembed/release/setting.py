"""What a setting does to vectors, in expectation, and what is wrong with it: the note every
release carries (:attr:`privembed.release.ReleaseSummary.setting`), ``protect`` and ``index``
print, and :mod:`privembed.evaluation.advice` builds on.

The expected mean cosine between a protected vector and its original comes from the mechanism's
closed form (``Mechanism.expected_cosine``, from :mod:`privembed.core.theory`); a one-line note is
added when it is below a useful level (:data:`USEFUL_COSINE`) or when the guarantee is vacuous
(:data:`VACUOUS_LDP_EPSILON`, :data:`VACUOUS_DELTA`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core._validation import check_int
from ..core.accounting import ApproxDP, Guarantee, MetricDP, NoGuarantee, PureDP
from ..mechanisms.base import Mechanism

__all__ = [
    "USEFUL_COSINE",
    "VACUOUS_DELTA",
    "VACUOUS_LDP_EPSILON",
    "SettingNote",
    "expected_cosine",
    "implied_ldp",
    "setting_note",
]

#: Expected mean cosine below which a setting is flagged as not useful. A mean cosine c means
#: the protected vector is the original plus noise of about ``sqrt(1/c^2 - 1)`` times its
#: length (1.7x at 0.5, 5.8x at 0.17); nearest-neighbour structure is gone well before that:
#: on the demo notes (all-MiniLM-L6-v2, 1,000 notes) a mean cosine of 0.46 kept 0.08 of each
#: note's 10 nearest neighbours and 0.79 kept 0.47 (docs/evaluation.md, run B), and the
#: issue's ``index -m gaussian --epsilon 10`` (mean cosine 0.05) returned none of the clean
#: top 5. 0.5 flags the settings where search is mostly noise without flagging every setting
#: that loses some neighbours.
USEFUL_COSINE = 0.5

#: Per-record LDP epsilon above which the guarantee is vacuous in practice. epsilon bounds how
#: much one release can change an attacker's odds on any yes/no question about the record:
#: by a factor e^epsilon. At 10 that factor is 22,026 -- enough to go from 1-in-1,000 prior odds
#: that a record is a given person's to 96% posterior belief -- so a larger epsilon promises
#: nothing a reader could rely on (the literature's "strong" range is epsilon <= 1, and local
#: DP deployments publish single-digit per-report epsilons).
VACUOUS_LDP_EPSILON = 10.0

#: delta above which an (epsilon, delta) guarantee is vacuous: delta is the probability that
#: the epsilon bound fails outright, and it must be far below one over the number of records;
#: at 1e-3, one record in a thousand may be released with no protection at all.
VACUOUS_DELTA = 1e-3


def implied_ldp(guarantee: Guarantee) -> tuple[float, float] | None:
    """The per-record (epsilon, delta) LDP a guarantee implies, or None if it implies none.

    Metric (d_X) privacy implies pure LDP on a bounded domain (listed in ``implied``).

    Examples
    --------
    >>> implied_ldp(PureDP(2.0)), implied_ldp(NoGuarantee("plain"))
    ((2.0, 0.0), None)
    """
    if isinstance(guarantee, ApproxDP):
        return float(guarantee.epsilon), float(guarantee.delta)
    if isinstance(guarantee, PureDP):
        return float(guarantee.epsilon), 0.0
    if isinstance(guarantee, MetricDP):
        for g in guarantee.implied:
            got = implied_ldp(g)
            if got is not None:
                return got
    return None


@dataclass(frozen=True)
class SettingNote:
    """What a mechanism setting does to vectors of dimension ``dim``, in expectation.

    Attributes
    ----------
    mechanism : str
        The mechanism's ``repr``.
    dim : int
    expected_cosine : float or None
        E[cos(x, release)] for a unit input (closed form), None where no closed form exists.
    guarantee : str
        The guarantee in words.
    ldp_epsilon, ldp_delta : float or None
        The per-record LDP it implies (None: no formal per-record guarantee).
    notes : tuple of str
        One line each: below :data:`USEFUL_COSINE`; vacuous guarantee; no closed form.
    evidence : tuple of str
        What the project's evidence says about named attackers at this setting (filled above
        this layer, :func:`privembed.evaluation.evidence.with_evidence`): a vacuous guarantee
        is never printed without it.
    """

    mechanism: str
    dim: int
    expected_cosine: float | None
    guarantee: str
    ldp_epsilon: float | None
    ldp_delta: float | None
    notes: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()

    @property
    def vacuous(self) -> bool:
        """Whether a note calls the guarantee vacuous in practice."""
        return any(n.startswith("the guarantee is vacuous") for n in self.notes)

    @property
    def warn(self) -> bool:
        """Whether any note is a warning (low utility or vacuous guarantee)."""
        return any(not n.startswith("no closed form") for n in self.notes)

    def summary(self, *, guarantee: bool = True) -> str:
        """One line: the expected mean cosine (or that none is known) and, unless told not to
        (a caller that already printed it), the guarantee."""
        cos = (
            f"expected mean cosine {self.expected_cosine:.3f} (closed form, d = {self.dim})"
            if self.expected_cosine is not None
            else f"expected mean cosine: no closed form for {self.mechanism}"
        )
        return f"{cos}; guarantee: {self.guarantee}" if guarantee else cos

    def lines(self) -> list[str]:
        """:meth:`summary` and then every note: what ``protect`` / ``index`` print."""
        return [self.summary(), *self.notes, *self.evidence]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "dim": self.dim,
            "expected_cosine": self.expected_cosine,
            "guarantee": self.guarantee,
            "ldp_epsilon": self.ldp_epsilon,
            "ldp_delta": self.ldp_delta,
            "notes": list(self.notes),
            "evidence": list(self.evidence),
            "useful_cosine": USEFUL_COSINE,
            "vacuous_ldp_epsilon": VACUOUS_LDP_EPSILON,
            "vacuous_delta": VACUOUS_DELTA,
        }


def expected_cosine(mechanism: Any, dim: int) -> float | None:
    """E[cos(x, release)] for a unit input of dimension ``dim``: ``mechanism.expected_cosine(dim)``
    (the Mechanism hook), None where the mechanism has no closed form."""
    fn = getattr(mechanism, "expected_cosine", None)
    if not callable(fn):
        return None
    value = fn(dim)
    return None if value is None else float(value)


def setting_note(mechanism: Mechanism, dim: int) -> SettingNote:
    """The expected mean cosine of a setting and what is wrong with it, if anything.

    Parameters
    ----------
    mechanism : Mechanism
        A built mechanism (e.g. from :func:`~privembed.mechanisms.build_mechanism`).
    dim : int
        The embeddings' dimension.

    Returns
    -------
    SettingNote
        ``lines()`` is what a command prints; ``to_dict()`` its ``--json`` form.

    Examples
    --------
    >>> from privembed.mechanisms import GaussianMechanism, LaplaceMechanism
    >>> n = setting_note(GaussianMechanism(epsilon=10.0, delta=1e-5), 384)
    >>> round(n.expected_cosine, 3), n.warn
    (0.051, True)
    >>> print(n.notes[0])  # doctest: +ELLIPSIS
    expected mean cosine 0.051 is below 0.5: ...
    >>> setting_note(LaplaceMechanism(epsilon=1000.0), 384).notes[0].startswith("the guarantee is vacuous")
    True
    """
    dim = check_int("dim", dim, ge=2)
    cos = expected_cosine(mechanism, dim)
    g = mechanism.guarantee
    ldp = implied_ldp(g)
    notes: list[str] = []
    if cos is None:
        notes.append(
            f"no closed form for the expected cosine of {mechanism.name}: measure it with "
            "'privembed evaluate' or 'privembed advise'."
        )
    elif cos < USEFUL_COSINE:
        noise = math.sqrt(max(1.0 / max(cos, 1e-12) ** 2 - 1.0, 0.0))
        notes.append(
            f"expected mean cosine {cos:.3f} is below {USEFUL_COSINE:g}: the noise is about "
            f"{noise:.1f}x the vector's length, and search over such vectors mostly returns "
            "other records than the clean search would; raise epsilon (see 'privembed advise')."
        )
    if isinstance(g, NoGuarantee) or ldp is None:
        notes.append(
            f"the guarantee is no per-record LDP ({g.describe()}): nothing bounds what one "
            "release reveals about a record."
        )
    else:
        eps, delta = ldp
        if eps > VACUOUS_LDP_EPSILON:
            notes.append(
                f"the guarantee is vacuous in practice: it implies {eps:.4g}-LDP per record, "
                f"above {VACUOUS_LDP_EPSILON:g} (a release may multiply an attacker's odds on "
                f"any yes/no question about the record by e^{eps:.4g})."
            )
        if delta > VACUOUS_DELTA:
            notes.append(
                f"the guarantee is vacuous in practice: delta = {delta:.3g} (above "
                f"{VACUOUS_DELTA:g}) is the probability that the epsilon bound fails outright."
            )
    return SettingNote(
        mechanism=repr(mechanism),
        dim=dim,
        expected_cosine=cos,
        guarantee=g.describe(),
        ldp_epsilon=None if ldp is None else ldp[0],
        ldp_delta=None if ldp is None else ldp[1],
        notes=tuple(notes),
    )
