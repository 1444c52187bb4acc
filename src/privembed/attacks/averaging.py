r"""Averaging attack: average N releases of the same record and watch the noise shrink.

With fresh noise per release, the mean of N releases concentrates on the original direction.
For unit-length releases :math:`y_r = a_r x + b_r u_r` (:math:`a_r = \cos(y_r, x)`,
:math:`u_r \perp x` a unit vector, independent and isotropic across releases) the cosine of the
average to the original is, for large d,

.. math::
    \cos(\bar y_N, x) \approx \frac{\mu}{\sqrt{\mu^2 + (1 - m_2)/N}},
    \qquad \mu = E[a],\ m_2 = E[a^2]

(:func:`expected_average_cosine`): the orthogonal noise shrinks like :math:`1/\sqrt N`. With
*keyed* noise (:mod:`privembed.keys.keyed`) every re-release is bit-identical, so the average is the
single release and the attacker gains exactly nothing -- the reason keyed noise exists.

Token leakage of the averaged vectors is measured with any fitted token attack (e.g.
:class:`~privembed.attacks.MLCAttack`).

**The common result** (:meth:`AveragingReport.result`). What this attack asks is whether
*re-releases* leak more than one release, so its baseline is the same attacker holding the same
releases but using one of them: for the largest :math:`N` tried and record :math:`i`,

.. math::
    g_i = \cos(\bar y_{N,i}, x_i) - \frac1N \sum_{r < N} \cos(y_{r,i}, x_i),

the cosine of the average of the first :math:`N` releases minus the mean cosine of a single one
of them (the mean over the :math:`N` releases is the lowest-variance estimate of what one
release gives). The statistic ``cosine@N`` is the mean over records of the first term, the
baseline the mean of the second, and the interval of the excess is the 95% paired Student-t
interval :math:`\bar g \pm t_{0.975,\,n-1}\, s_g / \sqrt n` over the :math:`n` records (the
records are independent; the releases of one record are not, hence the pairing per record).
Keyed releases are identical, so :math:`g_i = 0` up to float rounding and the attack does not
beat its baseline; fresh noise gives :math:`g_i > 0` for every record once :math:`N > 1`. (The
attacker with no vector at all -- cosine about 0 -- is the baseline of the other attacks, not
this one: against it a single noisy release would already count as a gain from averaging.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int, check_real
from ..search.geometry import mean_cosine, unit_pairs
from ._common import embeddings_f64
from .base import AttackResult

__all__ = ["AveragingReport", "averaging_attack", "expected_average_cosine"]


def expected_average_cosine(parallel: float, orthogonal: float, n: int) -> float:
    r"""Large-d cosine of the mean of ``n`` releases to the original (see the module notes).

    ``parallel`` is :math:`E[\langle y, \hat x\rangle]`, ``orthogonal`` is
    :math:`E\|y - \langle y, \hat x\rangle \hat x\|^2` of a single release ``y`` (for unit
    releases: :math:`\mu` and :math:`1 - m_2`).

    Examples
    --------
    >>> round(expected_average_cosine(0.1, 0.99, 1), 3), round(expected_average_cosine(0.1, 0.99, 100), 3)
    (0.1, 0.709)
    """
    parallel = check_real("parallel", parallel)
    orthogonal = check_real("orthogonal", orthogonal, ge=0)
    n = check_int("n", n, ge=1)
    den = float(np.sqrt(parallel * parallel + orthogonal / n))
    return parallel / den if den > 0 else 1.0


@dataclass(frozen=True)
class AveragingReport:
    """Cosine to the original (and optionally token leakage) of the average of N releases.

    ``single_cosine`` is the mean cosine of one release to its original, over the records and
    the releases averaged at the largest N; ``gain_interval`` the 95% paired t interval, over
    the ``n_records`` records, of that N's mean cosine minus ``single_cosine`` (module notes).
    """

    n_releases: list[int]
    mean_cosine: list[float]
    expected_cosine: list[float] = field(default_factory=list)
    leakage: list[float] = field(default_factory=list)
    keyed: bool = False
    single_cosine: float = float("nan")
    gain_interval: tuple[float, float] = (float("nan"), float("nan"))
    n_records: int = 0

    @property
    def gain(self) -> float:
        """Mean-cosine gain of the largest N over a single release."""
        return self.mean_cosine[-1] - self.mean_cosine[0]

    def result(self) -> AttackResult:
        """The mean cosine of the average of the largest N releases (``cosine@N``) against that
        of a single release -- no averaging -- with the paired t interval over the records."""
        i = self.n_releases.index(max(self.n_releases))
        lo, hi = self.gain_interval
        return AttackResult(
            attack="averaging",
            statistic=f"cosine@{self.n_releases[i]}",
            value=self.mean_cosine[i],
            blind=self.single_cosine,
            excess_low=lo,
            excess_high=hi,
            method=f"paired t interval over {self.n_records} records; "
            "blind = a single release (no averaging)",
        )

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for i, n in enumerate(self.n_releases):
            r: dict[str, Any] = {"n_releases": n, "mean_cosine": self.mean_cosine[i]}
            if self.expected_cosine:
                r["expected_cosine"] = self.expected_cosine[i]
            if self.leakage:
                r["leakage"] = self.leakage[i]
            out.append(r)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gain_interval"] = list(self.gain_interval)
        return {**d, "gain": self.gain}


def averaging_attack(
    releases: Any,
    originals: Any,
    *,
    n_releases: Sequence[int] | None = None,
    token_attack: Any = None,
    texts: Iterable[Any] | None = None,
    sensitive: Iterable[Iterable[str]] | None = None,
    keyed: bool = False,
) -> AveragingReport:
    """Average the first N releases, for each N, and score the averages.

    Parameters
    ----------
    releases : array_like, shape (N_max, n, d)
        Releases of the same ``n`` records (see :func:`~privembed.attacks.release_stack`).
    originals : array_like, shape (n, d)
    n_releases : sequence of int, optional
        The N to try (default 1, 2, 4, ... up to N_max).
    token_attack : fitted attack with ``score(texts, embeddings, sensitive=...)``, optional
        Its ``leakage`` on the averages is reported too (needs ``texts``).
    keyed : bool
        Recorded in the report (keyed releases are identical; nothing is computed differently).

    Examples
    --------
    >>> from privembed.mechanisms import LaplaceMechanism
    >>> from privembed.attacks import release_stack
    >>> X = np.eye(64)[:20] + 0.01
    >>> R = release_stack(LaplaceMechanism(epsilon=10.0), X, 16, rng=0)
    >>> rep = averaging_attack(R, X, n_releases=[1, 16])
    >>> rep.mean_cosine[1] > 2 * rep.mean_cosine[0]
    True
    """
    R = np.asarray(releases, dtype=np.float64)
    if R.ndim != 3:
        raise DataError(f"releases must have shape (N, n, d), got {R.shape}.")
    X = embeddings_f64(originals, "originals")
    if R.shape[1:] != X.shape:
        raise DataError(f"releases are {R.shape[1:]} per release but originals are {X.shape}.")
    n_max = R.shape[0]
    if n_releases is None:
        ns = [1 << k for k in range(n_max.bit_length()) if (1 << k) <= n_max]
    else:
        ns = [check_int("n_releases", int(v), ge=1, le=n_max) for v in n_releases]
    if token_attack is not None and texts is None:
        raise ValueError("token_attack needs the true texts (texts=...).")
    text_list = list(texts) if texts is not None else None
    sens_list = [set(s) for s in sensitive] if sensitive is not None else None
    xhat = _unit(X)
    par = np.einsum("rij,ij->ri", R, xhat)  # component of every release along its original
    parallel = float(par.mean())
    orthogonal = float((np.einsum("rij,rij->ri", R, R) - par**2).mean())
    cosines, expected, leak = [], [], []
    for n in ns:
        avg = R[:n].mean(axis=0)
        cosines.append(mean_cosine(avg, X))
        if not keyed:
            expected.append(expected_average_cosine(parallel, orthogonal, n))
        if token_attack is not None:
            rep = token_attack.score(text_list, avg, sensitive=sens_list)
            leak.append(float(rep.leakage))
    single, interval = _gain_over_single(R[: max(ns)], X)
    return AveragingReport(
        n_releases=ns,
        mean_cosine=cosines,
        expected_cosine=expected,
        leakage=leak,
        keyed=keyed,
        single_cosine=single,
        gain_interval=interval,
        n_records=int(X.shape[0]),
    )


def _row_cosines(A: NDArray[np.float64], X: NDArray[np.float64]) -> NDArray[np.float64]:
    """Cosine of every row of ``A`` to the same row of ``X`` (as :func:`mean_cosine` takes it)."""
    U, V = unit_pairs(A, X)
    return np.einsum("ij,ij->i", U, V)


def _gain_over_single(
    R: NDArray[np.float64], X: NDArray[np.float64], level: float = 0.95
) -> tuple[float, tuple[float, float]]:
    """Mean single-release cosine of the releases ``R`` and the paired t interval, over records,
    of the gain of their average over it (module notes); one record: the whole range [-2, 2]."""
    from scipy.stats import t

    single = np.mean([_row_cosines(Y, X) for Y in R], axis=0)
    g = _row_cosines(R.mean(axis=0), X) - single
    n = g.size
    if n < 2:
        return float(single.mean()), (-2.0, 2.0)
    half = float(t.ppf((1 + level) / 2, n - 1) * g.std(ddof=1) / np.sqrt(n))
    return float(single.mean()), (float(g.mean()) - half, float(g.mean()) + half)


def _unit(A: NDArray[np.float64]) -> NDArray[np.float64]:
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)
