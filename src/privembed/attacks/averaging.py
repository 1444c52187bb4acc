r"""Averaging attack: average N releases of the same record and watch the noise shrink.

With fresh noise per release, the mean of N releases concentrates on the original direction.
For unit-length releases :math:`y_r = a_r x + b_r u_r` (:math:`a_r = \cos(y_r, x)`,
:math:`u_r \perp x` a unit vector, independent and isotropic across releases) the cosine of the
average to the original is, for large d,

.. math::
    \cos(\bar y_N, x) \approx \frac{\mu}{\sqrt{\mu^2 + (1 - m_2)/N}},
    \qquad \mu = E[a],\ m_2 = E[a^2]

(:func:`expected_average_cosine`): the orthogonal noise shrinks like :math:`1/\sqrt N`. With
*keyed* noise (:mod:`privembed.keyed`) every re-release is bit-identical, so the average is the
single release and the attacker gains exactly nothing -- the reason keyed noise exists.

Token leakage of the averaged vectors is measured with any fitted token attack (e.g.
:class:`~privembed.attacks.MLCAttack`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError, check_int, check_real
from ..geometry import mean_cosine
from ._common import embeddings_f64

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
    """Cosine to the original (and optionally token leakage) of the average of N releases."""

    n_releases: list[int]
    mean_cosine: list[float]
    expected_cosine: list[float] = field(default_factory=list)
    leakage: list[float] = field(default_factory=list)
    keyed: bool = False

    @property
    def gain(self) -> float:
        """Mean-cosine gain of the largest N over a single release."""
        return self.mean_cosine[-1] - self.mean_cosine[0]

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
        return {**asdict(self), "gain": self.gain}


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
    return AveragingReport(
        n_releases=ns, mean_cosine=cosines, expected_cosine=expected, leakage=leak, keyed=keyed
    )


def _unit(A: NDArray[np.float64]) -> NDArray[np.float64]:
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)
