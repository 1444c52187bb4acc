"""Compiled per-record draws for keyed and seeded noise (optional: numba, extra ``fast``).

:class:`privembed.rng.CounterSource` gives every record its own Philox-4x64 stream. In pure
numpy each record costs a repositioning of the bit generator and a separate fill call from
Python, which holds the GIL (about 10 µs per 384-d record, against about 1 µs for the numbers
themselves). These kernels run the same loop in compiled code: for each row they write the
row's key and counter into the *same* numpy ``Philox`` bit generator's C state (the in-place
layout that :class:`~privembed.rng._PhiloxCursor` verified against numpy's public API) and draw
through numba's implementation of numpy's ``Generator`` methods, which calls that bit generator
and uses numpy's own algorithms (ziggurat normals, Marsaglia-Tsang gammas, 53-bit doubles).
The output is therefore bit-identical to the pure-numpy path (tested row for row), and the
loops release the GIL, so blocks on two threads run in parallel.

Importing this module imports numba (and compiles or loads the cached kernels on first call);
:func:`kernels` returns ``None`` when numba is not installed or ``PRIVEMBED_JIT=0``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_loaded: Any = None  # None: not tried; False: unavailable; else the module namespace
_rows_seen = 0

#: Rows drawn in pure numpy, per process, before the kernels are loaded. Loading costs about
#: 0.6 s (importing numba 0.2 s, its dispatchers 0.25 s, reading the cached machine code 0.15 s
#: per kernel) and saves about 3.5 µs per 384-d record on two threads, so it pays off after
#: some 170,000 records: small releases never load it, large ones and long-running processes
#: switch to it once, with identical output.
LOAD_AFTER_ROWS = 200_000


def _enabled() -> bool:
    return os.environ.get("PRIVEMBED_JIT", "1").strip().lower() not in ("0", "false", "no", "off")


def kernels(rows: int = 0) -> Any:
    """The compiled kernels, or ``None`` (not installed, disabled, or still below
    :data:`LOAD_AFTER_ROWS` rows in this process); ``rows`` counts towards that threshold."""
    global _loaded, _rows_seen
    if _loaded is not None:
        return _loaded or None
    with _lock:
        _rows_seen += rows
        if _loaded is None and (_rows_seen >= LOAD_AFTER_ROWS or rows < 0):
            _loaded = _load() if _enabled() else False
    return _loaded or None


def _load() -> Any:
    try:
        from . import _jit_kernels
    except ImportError:
        return False
    if not _reproduces_numpy(_jit_kernels):
        import warnings

        warnings.warn(
            "privembed: the compiled noise kernels do not reproduce numpy's draws with this "
            "numba/numpy pair; using the pure-numpy path (same output, slower).",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return _jit_kernels


def _reproduces_numpy(k: Any) -> bool:
    """Every kernel against the pure-numpy loop on a few random rows, before first use.

    Keyed noise must be a function of (key, tag) alone: were a numba release to change an
    algorithm, one record would get different noise with and without numba while the ledger,
    seeing the same tag, recorded the second release as free. So the kernels are used only
    when they give exactly numpy's numbers here.
    """
    import numpy as np

    from .rng import CounterSource

    rows = np.random.default_rng(20261126).integers(0, 1 << 64, size=(7, 2), dtype=np.uint64)

    def draws(use_kernels: bool) -> list[Any]:
        src = CounterSource(bytes(range(16)), rows)
        if not src._cursor._fast:
            raise RuntimeError("no in-place Philox positioning")
        if not use_kernels:
            src._kernel = lambda name: None  # type: ignore[method-assign]
        else:
            src._kernel = lambda name: src._run(k, name)  # type: ignore[method-assign]
        return [
            src.normal(7, 5),
            src.uniform(7, 3),
            src.gamma(2.5, 7),
            *src.normal_gamma(7, 4, 0.7),
        ]

    try:
        return all(np.array_equal(a, b) for a, b in zip(draws(True), draws(False), strict=True))
    except Exception:  # any surprise: do not use the kernels
        return False
