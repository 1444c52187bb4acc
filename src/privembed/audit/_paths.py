"""Which randomness path of a mechanism the audit draws from: seeded, fresh, or keyed.

A sampler can be right on one path and wrong on another (a generator-specific bug, a keyed
source that scales its normals): each path is audited only by drawing through it.

* ``"seeded"`` -- ``privatize(X, rng=<generator>)``: per-row counter streams, reproducible.
* ``"fresh"`` -- ``privatize(X, rng=None)``: fresh OS entropy and block generators.
* ``"keyed"`` -- the production release path: :class:`privembed.release.Release` with a secret
  key (derived from the audit's ``rng``, so a seeded audit is reproducible) and the keyed
  generator (``"philox"`` or ``"aes"``). Every row is released under its own record id, so
  the draws are independent, as for distinct records of one release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_choice
from ..mechanisms.base import Mechanism
from ..release import Release, default_keyed_generator

__all__ = ["GENERATORS", "NOISE", "NoisePath"]

NOISE = ("seeded", "fresh", "keyed")
GENERATORS = ("philox", "aes")


class NoisePath:
    """How an audit reaches a mechanism's noise (one object per audit: its ids never repeat).

    Parameters
    ----------
    noise : {"seeded", "fresh", "keyed"}
    generator : {"philox", "aes"}, optional
        Keyed noise only; default: the one a release would use
        (:func:`privembed.release.default_keyed_generator`).
    key_rng : numpy.random.Generator, optional
        Keyed noise: the 32-byte key is drawn from it.
    """

    def __init__(
        self,
        noise: str = "seeded",
        *,
        generator: str | None = None,
        key_rng: np.random.Generator | None = None,
    ) -> None:
        self.noise = check_choice("noise", noise, NOISE)
        if generator is not None and self.noise != "keyed":
            raise ValueError(
                "generator chooses the generator of keyed noise; it needs noise='keyed', got "
                f"generator={generator!r} with noise={noise!r}."
            )
        self.generator: str | None = None
        self._key: bytes | None = None
        if self.noise == "keyed":
            gen = default_keyed_generator() if generator is None else generator
            self.generator = check_choice("generator", gen, GENERATORS)
            g = key_rng if key_rng is not None else np.random.default_rng()
            self._key = bytes(g.bytes(32))
        self._released = 0

    def release(
        self, mech: Mechanism, X: NDArray[Any], rng: np.random.Generator, label: str
    ) -> NDArray[np.float64]:
        """Release the rows of ``X`` through this path (``rng`` feeds the seeded path only)."""
        if self.noise == "seeded":
            return np.asarray(mech.privatize(X, rng=rng), dtype=np.float64)
        if self.noise == "fresh":
            return np.asarray(mech.privatize(X, rng=None), dtype=np.float64)
        start = self._released
        self._released += X.shape[0]
        ids = [f"audit-{label}-{i}" for i in range(start, start + X.shape[0])]
        with Release(mech, key=self._key, generator=self.generator) as rel:
            return np.asarray(rel.protect(X, ids), dtype=np.float64)
