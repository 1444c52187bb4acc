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

import abc
import contextlib
import ctypes
import hashlib
import numbers
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeAlias

import numpy as np
from numpy.typing import NDArray

from . import labels

__all__ = [
    "CounterSource",
    "GeneratorSource",
    "NoiseSource",
    "RNGLike",
    "as_generator",
    "bit_generator_name",
    "register_bit_generator",
    "seed_stream_key",
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


# ---------------------------------------------------------------------------------------------
# noise sources: row-aligned draws for one block of records
# ---------------------------------------------------------------------------------------------


class NoiseSource(abc.ABC):
    """Row-aligned random draws for a block of ``n`` records.

    Row ``i`` of every draw belongs to record ``i``. A source serves exactly one block, in the
    fixed call sequence its mechanism makes; mechanisms draw only through this interface, so
    they do not know (or need to know) where the randomness comes from.
    """

    @abc.abstractmethod
    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        """Standard normal draws, shape (n, k)."""

    @abc.abstractmethod
    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        """Uniform [0, 1) draws, shape (n, k)."""

    @abc.abstractmethod
    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        """Gamma(shape, scale=1) draws, shape (n,)."""

    def normal_gamma(
        self, n: int, k: int, shape: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Standard normals (n, k) and Gamma(shape) draws (n,) for the same rows -- what a
        radial (direction x radius) sampler needs; sources may draw both in one pass per row."""
        return self.normal(n, k), self.gamma(shape, n)


class GeneratorSource(NoiseSource):
    """A :class:`NoiseSource` backed by one :class:`numpy.random.Generator` (bulk draws).

    Rows are not separable: the draws of row ``i`` depend on the rows before it in the block.
    Used for fresh noise, where nothing needs to be reproduced.
    """

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        return self.rng.standard_normal((n, k))

    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        return self.rng.random((n, k))

    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        return self.rng.standard_gamma(shape, size=n)


#: domain of the stream keys derived from integer seeds (see :func:`seed_stream_key`)
_SEED_DOMAIN = labels.SEEDED_ROWS


def seed_stream_key(rng: Any) -> bytes:
    """A 128-bit stream key for :class:`CounterSource` from an int seed or a Generator.

    An int gives the same key every time (reproducible experiments); a Generator contributes
    128 fresh bits from its stream (and advances by that much).

    Examples
    --------
    >>> seed_stream_key(3) == seed_stream_key(3), len(seed_stream_key(3))
    (True, 16)
    """
    if rng is None or isinstance(rng, bool):
        raise TypeError(f"rng must be an int or a numpy.random.Generator, got rng={rng!r}.")
    g = as_generator(rng)  # an int seed and the Generator it makes give the same key
    words = g.integers(0, 1 << 64, size=2, dtype=np.uint64)
    return hashlib.sha256(_SEED_DOMAIN + words.astype("<u8").tobytes()).digest()[:16]


class _PhiloxCursor:
    """One Philox-4x64 bit generator that can be positioned at any (key, counter) cheaply.

    numpy's public way to position a Philox generator is its ``state`` setter (a dict round
    trip, ~5 us). When numpy's C state layout is the expected one (checked once per process
    against the public API, output for output), the counter and key are written in place
    through ``BitGenerator.ctypes`` instead (~0.5 us); otherwise the public setter is used.
    """

    _layout_ok: ClassVar[bool | None] = None

    def __init__(self) -> None:
        self.bg = np.random.Philox(key=0)
        self.gen = np.random.Generator(self.bg)
        self._state = self.bg.state
        self._fast = False
        if _PhiloxCursor._layout_ok is None:
            _PhiloxCursor._layout_ok = self._probe_layout()
        if _PhiloxCursor._layout_ok:
            self._bind()

    def _bind(self) -> None:
        addr = self.bg.ctypes.state_address
        ptrs = ctypes.cast(addr, ctypes.POINTER(ctypes.c_void_p))
        self._ctr = np.ctypeslib.as_array((ctypes.c_uint64 * 4).from_address(ptrs[0]))
        self._key = np.ctypeslib.as_array((ctypes.c_uint64 * 2).from_address(ptrs[1]))
        self._pos = ctypes.c_int.from_address(addr + 2 * ctypes.sizeof(ctypes.c_void_p))
        self._pos_mem = np.ctypeslib.as_array(
            (ctypes.c_int * 1).from_address(ctypes.addressof(self._pos))
        )
        self._fast = True

    def _probe_layout(self) -> bool:
        """True if in-place positioning reproduces the public API exactly (a few probes)."""
        try:
            self._bind()
            probe = np.random.default_rng(20261126)
            for _ in range(3):
                key = probe.integers(0, 1 << 64, size=2, dtype=np.uint64)
                ctr = probe.integers(0, 1 << 64, size=4, dtype=np.uint64)
                self.position(key, ctr)
                fast = (self.gen.standard_normal(9), self.gen.standard_gamma(3.5))
                ref_gen = np.random.Generator(np.random.Philox(key=key, counter=ctr))
                ref = (ref_gen.standard_normal(9), ref_gen.standard_gamma(3.5))
                if not (np.array_equal(fast[0], ref[0]) and fast[1] == ref[1]):
                    return False
            return True
        except Exception:  # any surprise in the C layout: use the public setter
            return False
        finally:
            self._fast = False

    def position(self, key: NDArray[np.uint64], ctr: NDArray[np.uint64]) -> np.random.Generator:
        """Position at Philox key ``key`` (2 words) and counter ``ctr`` (4 words)."""
        if self._fast:
            self._key[:] = key
            self._ctr[:] = ctr
            self._pos.value = 4  # buffer exhausted: the next draw computes a fresh block
        else:
            st = self._state
            st["state"]["key"] = np.asarray(key, dtype=np.uint64)
            st["state"]["counter"] = np.asarray(ctr, dtype=np.uint64)
            st["buffer_pos"] = 4
            st["has_uint32"] = 0
            self.bg.state = st
        return self.gen


class CounterSource(NoiseSource):
    """Per-record streams: row ``i`` of call ``j`` is a pure function of (stream key, row id, j).

    Each row has a 128-bit row identifier ``rows[i]`` (two uint64 words). With ``generator=
    "philox"`` (default), row ``i`` of call ``j`` draws from Philox-4x64 with key = the 128-bit
    ``stream_key`` and counter words (0, j, rows[i][0], rows[i][1]): a row's draws advance only
    counter word 0, so distinct (row, call) pairs never share a counter, and no row's output
    depends on which other rows share its block -- batching, sharding and threading cannot
    change it. With ``generator="aes"`` (randomgen, extra ``secure``), row ``i`` uses AES-128 in
    counter mode with key = its row identifier XOR the stream key and counter ``j << 64``
    (a vetted cipher, at a higher cost per row).

    Used for keyed noise (row ids from :func:`privembed.keys.keyed.record_tags`) and for seeded
    experiments (row ids = absolute row numbers, stream key from :func:`seed_stream_key`).
    """

    def __init__(
        self, stream_key: bytes, rows: NDArray[np.uint64], *, generator: str = "philox"
    ) -> None:
        if not isinstance(stream_key, bytes) or len(stream_key) != 16:
            raise ValueError("stream_key must be 16 bytes.")
        rows = np.ascontiguousarray(rows, dtype=np.uint64)
        if rows.ndim != 2 or rows.shape[1] != 2:
            raise ValueError(f"rows must have shape (n, 2), got shape {rows.shape}.")
        if generator not in ("philox", "aes"):
            raise ValueError(f"generator must be 'philox' or 'aes', got generator={generator!r}.")
        self.generator = generator
        self._n = rows.shape[0]
        self._call = 0
        self._key = np.frombuffer(stream_key, dtype="<u8").astype(np.uint64)
        self._ctr = np.zeros((self._n, 4), dtype=np.uint64)
        self._ctr[:, 2:] = rows
        if generator == "aes":
            from ._optional import require

            self._rg = require("randomgen", "secure", purpose="AES counter-mode noise")
            k = int.from_bytes(stream_key, "little")
            self._aes_keys = [(int(a) | (int(b) << 64)) ^ k for a, b in rows.tolist()]
        else:
            self._cursor = _PhiloxCursor()

    @staticmethod
    def row_ids(start: int, n: int, *, salt: int = 0) -> NDArray[np.uint64]:
        """Row identifiers for absolute row numbers ``start .. start+n-1`` (seeded mode)."""
        out = np.zeros((n, 2), dtype=np.uint64)
        out[:, 0] = np.arange(start, start + n, dtype=np.uint64)
        out[:, 1] = np.uint64(salt)
        return out

    def _kernel(self, name: str) -> Any:
        """The compiled per-row kernel ``name`` (:mod:`privembed.core._jit`; same output as the
        Python loop, row for row), or None: then the rows are drawn in the Python loop."""
        if self.generator != "philox" or not self._cursor._fast:
            return None
        from . import _jit

        k = _jit.kernels(self._n, verify=_verify_kernels)
        if k is None:
            return None
        return self._run(k, name)

    def _run(self, k: Any, name: str) -> Any:
        j = self._call
        self._call += 1
        self._ctr[:, 1] = j
        c = self._cursor
        fn = getattr(k, name)
        return lambda *args: fn(c.gen, c._key, c._ctr, c._pos_mem, self._key, self._ctr, *args)

    def _gens(self) -> Iterator[np.random.Generator]:
        j = self._call
        self._call += 1
        if self.generator == "aes":
            for k in self._aes_keys:
                yield np.random.Generator(self._rg.AESCounter(key=k, counter=j << 64))
            return
        ctr = self._ctr
        ctr[:, 1] = j
        position = self._cursor.position
        key = self._key
        for i in range(self._n):
            yield position(key, ctr[i])

    def _check(self, n: int) -> None:
        if n != self._n:
            raise ValueError(f"this source has {self._n} rows, asked for n={n}.")

    def _rows(
        self, n: int, k: int, kernel: str, draw: Callable[[np.random.Generator, Any], Any]
    ) -> NDArray[np.float64]:
        """(n, k) draws, row i from row i's stream: the compiled ``kernel`` if there is one,
        else ``draw(generator, row)`` filling each row in the Python loop."""
        self._check(n)
        out = np.empty((n, k))
        if (run := self._kernel(kernel)) is not None:
            run(out)
            return out
        for row, g in zip(out, self._gens(), strict=True):
            draw(g, row)
        return out

    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        return self._rows(n, k, "normal_rows", lambda g, row: g.standard_normal(out=row))

    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        return self._rows(n, k, "uniform_rows", lambda g, row: g.random(out=row))

    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        self._check(n)
        # numpy refuses shape < 0 and returns NaN for a NaN shape; the kernels are only for
        # the shapes the mechanisms use (shape > 0, finite or not): check before the counter moves
        if shape > 0 and (run := self._kernel("gamma_rows")) is not None:
            r = np.empty(n)
            run(float(shape), r)
            return r
        return np.fromiter(
            (g.standard_gamma(shape) for g in self._gens()), dtype=np.float64, count=n
        )

    def normal_gamma(
        self, n: int, k: int, shape: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """One positioning per row: its k normals, then its gamma, from the same stream."""
        self._check(n)
        out = np.empty((n, k))
        r = np.empty(n)
        if shape > 0 and (run := self._kernel("normal_gamma_rows")) is not None:
            run(float(shape), out, r)
            return out, r
        for i, (row, g) in enumerate(zip(out, self._gens(), strict=True)):
            g.standard_normal(out=row)
            r[i] = g.standard_gamma(shape)
        return out, r


def expect_counter_rows(n: int) -> None:
    """Hint that about ``n`` :class:`CounterSource` rows are coming: the compiled kernels
    (:mod:`privembed.core._jit`) load now if that many rows pay for loading them."""
    from . import _jit

    _jit.kernels(max(0, int(n)), verify=_verify_kernels)


def _verify_kernels(k: Any) -> str | None:
    """Check compiled kernels (:mod:`privembed.core._jit`) against the pure-numpy loop on a few
    random rows, before their first use: ``None`` if every method gives exactly numpy's
    numbers, else why not (an empty string: unusable here, nothing to report).

    Keyed noise must be a function of (key, tag) alone: were a numba release to change an
    algorithm, one record would get different noise with and without numba while the ledger,
    seeing the same tag, recorded the second release as free.
    """
    if not _PhiloxCursor()._fast:  # numpy's Philox state is not the expected layout
        return ""
    rows = np.random.default_rng(20261126).integers(0, 1 << 64, size=(7, 2), dtype=np.uint64)

    def draws(use_kernels: bool) -> list[Any]:
        src = CounterSource(bytes(range(16)), rows)
        src._kernel = (  # type: ignore[method-assign]
            (lambda name: src._run(k, name)) if use_kernels else (lambda name: None)
        )
        return [  # shape 1.0 takes its own path in numpy's gamma (Laplace at d = 1)
            src.normal(7, 5),
            src.uniform(7, 3),
            src.gamma(2.5, 7),
            src.gamma(1.0, 7),
            *src.normal_gamma(7, 4, 0.7),
            *src.normal_gamma(7, 3, 1.0),
        ]

    same = all(np.array_equal(a, b) for a, b in zip(draws(True), draws(False), strict=True))
    return None if same else "they do not reproduce numpy's draws with this numba/numpy pair"
