"""The randomness policy: one ``rng`` parameter everywhere, one place that picks the bit generator.

Every sampling call in privembed takes ``rng: int | numpy.random.Generator | None``:

* ``None`` -- fresh operating-system entropy (:class:`numpy.random.SeedSequence` with no seed
  reads 128 bits from the OS). There is **no** fixed default seed anywhere in the library.
* ``int`` -- a reproducible stream, for experiments and tests only.
* a :class:`numpy.random.Generator` -- used as is (its state advances).

Mechanism code only ever calls methods of a :class:`numpy.random.Generator`; which bit generator
backs a generator built from ``None`` or an ``int`` is policy, chosen here, in one place
(:func:`set_bit_generator`). The default is PCG64; ``"philox"`` (a counter-based generator) is
also available; with the ``secure`` extra (randomgen) the cryptographic generators ``"aes"``
(AES-128 in counter mode, AES-NI accelerated) and ``"chacha"`` (ChaCha20) are selectable
here too, and any other bit generator can be registered with :func:`register_bit_generator`.
Mechanism code never changes.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import numpy as np

__all__ = [
    "RNGLike",
    "as_generator",
    "bit_generator_name",
    "register_bit_generator",
    "set_bit_generator",
    "spawn",
    "use_bit_generator",
]

RNGLike: TypeAlias = "int | np.integer[Any] | np.random.Generator | None"

_FACTORIES: dict[str, Callable[[np.random.SeedSequence], np.random.BitGenerator]] = {
    "pcg64": np.random.PCG64,
    "pcg64dxsm": np.random.PCG64DXSM,
    "philox": np.random.Philox,
    "sfc64": np.random.SFC64,
}
_current = "pcg64"


def _register_csprngs() -> None:
    """AES-128 counter mode and ChaCha (randomgen, extra ``secure``) when installed."""
    try:
        import randomgen
    except ImportError:  # pragma: no cover - depends on the environment
        return
    _FACTORIES["aes"] = randomgen.AESCounter
    _FACTORIES["chacha"] = lambda ss: randomgen.ChaCha(ss, rounds=20)


_register_csprngs()


def register_bit_generator(
    name: str, factory: Callable[[np.random.SeedSequence], np.random.BitGenerator]
) -> None:
    """Make a bit generator selectable by name (e.g. a CSPRNG-backed one).

    ``factory`` receives a :class:`numpy.random.SeedSequence` and returns a
    :class:`numpy.random.BitGenerator`.
    """
    if not callable(factory):
        raise TypeError(f"factory must be callable, got factory={factory!r}.")
    _FACTORIES[str(name)] = factory


def set_bit_generator(name: str) -> None:
    """Choose the bit generator behind generators built from ``None`` or an int seed."""
    global _current
    if name not in _FACTORIES:
        opts = ", ".join(repr(k) for k in sorted(_FACTORIES))
        raise ValueError(f"bit generator must be one of {opts}, got name={name!r}.")
    _current = name


def bit_generator_name() -> str:
    """Name of the bit generator currently in force."""
    return _current


@contextlib.contextmanager
def use_bit_generator(name: str) -> Iterator[None]:
    """Temporarily select a bit generator (restored on exit)."""
    previous = _current
    set_bit_generator(name)
    try:
        yield
    finally:
        set_bit_generator(previous)


def _from_seedseq(ss: np.random.SeedSequence) -> np.random.Generator:
    return np.random.Generator(_FACTORIES[_current](ss))


def as_generator(rng: Any = None) -> np.random.Generator:
    """Normalise an ``rng`` argument to a :class:`numpy.random.Generator`.

    Examples
    --------
    >>> g = as_generator(7); h = as_generator(7)
    >>> bool(g.standard_normal() == h.standard_normal())
    True
    >>> as_generator(g) is g
    True
    >>> as_generator("seed")
    Traceback (most recent call last):
    ...
    TypeError: rng must be an int, a numpy.random.Generator or None, got rng='seed'.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return _from_seedseq(np.random.SeedSequence())
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        if int(rng) < 0:
            raise ValueError(f"rng seed must be >= 0, got rng={int(rng)}.")
        return _from_seedseq(np.random.SeedSequence(int(rng)))
    raise TypeError(f"rng must be an int, a numpy.random.Generator or None, got rng={rng!r}.")


def spawn(rng: Any, n: int) -> list[np.random.Generator]:
    """Return ``n`` statistically independent child generators.

    Children of the same seed are reproducible; children of different indices are independent
    streams (``SeedSequence.spawn``), suitable for repeated runs of a sweep.

    Examples
    --------
    >>> a = [g.integers(1 << 30) for g in spawn(3, 2)]
    >>> b = [g.integers(1 << 30) for g in spawn(3, 2)]
    >>> bool(a == b and a[0] != a[1])
    True
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got n={n!r}.")
    if isinstance(rng, np.random.Generator):
        return list(rng.spawn(int(n)))
    if rng is None:
        ss = np.random.SeedSequence()
    else:
        as_generator(rng)  # validates
        ss = np.random.SeedSequence(int(rng))
    return [_from_seedseq(child) for child in ss.spawn(int(n))]
