r"""The law of :math:`\cos(x, M(x))` for a mechanism ``M``: how a mechanism enters k' theory.

For every isotropic mechanism the protected vector of a unit input ``x`` is
:math:`c\,x + \sqrt{1-c^2}\,v` with ``v`` uniform orthogonal to ``x`` and independent of ``c``,
so a mechanism enters the rank model (:mod:`privembed.search.rerank`) only through the law of
``c`` (:func:`cosine_law`); a subspace mechanism's law depends on the signal's norm as well
(:data:`_NORM_LAWS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_int
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism


def _sphere_coordinate(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float64]:
    """A coordinate of a uniform point on S^{d-1} (exact: g / sqrt(g^2 + chi^2_{d-1}))."""
    g = rng.standard_normal(n)
    return g / np.sqrt(g * g + rng.chisquare(d - 1, n))


def _radial_cosines(
    radius: NDArray[np.float64], rng: np.random.Generator, d: int
) -> NDArray[np.float64]:
    a = _sphere_coordinate(rng, radius.size, d)
    return (1.0 + radius * a) / np.sqrt(1.0 + 2.0 * radius * a + radius * radius)


def _laplace(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    return _radial_cosines(rng.standard_gamma(float(d), n) / float(m.epsilon), rng, d)  # type: ignore[attr-defined]


def _gaussian(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    return _radial_cosines(float(m.sigma) * np.sqrt(rng.chisquare(d, n)), rng, d)  # type: ignore[attr-defined]


def _purkayastha(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    table = m.angle_table(d)  # type: ignore[attr-defined]
    return np.cos(table.sample(rng.random(n), rng.random(n)))


#: closed-form laws by mechanism name (the noise law of each family); others are simulated
_COSINE_LAWS: dict[
    str, Callable[[Mechanism, int, int, np.random.Generator], NDArray[np.float64]]
] = {
    "laplace": _laplace,
    "gaussian": _gaussian,
    "empirical": _gaussian,
    "purkayastha": _purkayastha,
}


def _subspace_law(
    m: Mechanism, norms: NDArray[np.float64], rng: np.random.Generator
) -> NDArray[np.float64]:
    return np.asarray(m.cosine_draws(norms, rng=rng), dtype=np.float64)  # type: ignore[attr-defined]


#: laws of cos(v, M(v)) that depend on the signal's norm |v| (mechanisms that release a
#: projection with noise of a fixed scale)
_NORM_LAWS: dict[
    str, Callable[[Mechanism, NDArray[np.float64], np.random.Generator], NDArray[np.float64]]
] = {"subspace": _subspace_law}


def subspace_profile_needed(mechanism: Mechanism) -> bool:
    """Whether k' theory for ``mechanism`` needs a subspace profile
    (:meth:`ScoreProfile.from_subspace`): its noise law depends on the signal's norm."""
    return mechanism.name in _NORM_LAWS


def cosine_law(
    mechanism: Mechanism, d: int, *, n: int = 20_000, rng: Any = None
) -> NDArray[np.float64]:
    r"""``n`` draws of :math:`\cos(x, M(x))` for a unit input ``x`` in dimension ``d``.

    Laplace, Gaussian (``gaussian``, ``empirical``) and Purkayastha are sampled from their noise
    laws directly (no d-dimensional vectors); any other mechanism by privatising ``n`` random
    unit vectors with ``mechanism.privatize(X, rng=...)``.

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> from privembed.core import theory
    >>> c = cosine_law(get_mechanism("laplace", epsilon=200.0), 384, n=200_000, rng=0)
    >>> bool(abs(c.mean() - theory.expected_cosine_laplace(200.0, 384)) < 1e-3)
    True
    """
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a privembed Mechanism, got {mechanism!r}.")
    d = check_int("d", d, ge=3)
    n = check_int("n", n, ge=1)
    if mechanism.output_dim(d) != d:
        raise ValueError(
            f"k' theory needs a mechanism that keeps the dimension; {mechanism!r} maps {d} to "
            f"{mechanism.output_dim(d)} dimensions."
        )
    gen = as_generator(rng)
    law = _COSINE_LAWS.get(mechanism.name)
    if law is not None:
        return law(mechanism, d, n, gen)
    X = gen.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = np.asarray(mechanism.privatize(X, rng=gen), dtype=np.float64)
    return np.einsum("ij,ij->i", X, Y) / np.linalg.norm(Y, axis=1)
