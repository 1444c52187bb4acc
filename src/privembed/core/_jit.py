"""Compiled per-record draws for keyed and seeded noise (optional: numba, extra ``fast``).

:class:`privembed.core.rng.CounterSource` gives every record its own Philox-4x64 stream. In pure
numpy each record costs a repositioning of the bit generator and a separate fill call from
Python, which holds the GIL (about 10 µs per 384-d record, against about 1 µs for the numbers
themselves). These kernels run the same loop in compiled code: for each row they write the
row's key and counter into the *same* numpy ``Philox`` bit generator's C state (the in-place
layout that :class:`~privembed.core.rng._PhiloxCursor` verified against numpy's public API) and draw
through numba's implementation of numpy's ``Generator`` methods, which calls that bit generator
and uses numpy's own algorithms (ziggurat normals, Marsaglia-Tsang gammas, 53-bit doubles).
The output is therefore bit-identical to the pure-numpy path (tested row for row, and checked
again in every process before first use), and the loops release the GIL, so blocks on two
threads run in parallel.

This module does not import numba; :func:`kernels` loads :mod:`privembed.core._jit_kernels` (numba,
compiled or read from its on-disk cache) on demand, and returns ``None`` when numba is not
installed, the kernels fail their check, or ``PRIVEMBED_JIT=0``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
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


def kernels(rows: int = 0, *, verify: Callable[[Any], str | None] | None = None) -> Any:
    """The compiled kernels, or ``None`` (not installed, disabled, unusable here, or still
    below :data:`LOAD_AFTER_ROWS` rows in this process); ``rows`` counts towards that threshold
    (a negative ``rows`` loads now).

    ``verify(module)`` runs once, when the kernels are first loaded: ``None`` accepts them, a
    string refuses them and says why (:func:`privembed.core.rng._verify_kernels` checks them against
    numpy's own draws). Any failure means the pure-numpy path from then on; a
    ``RuntimeWarning`` says why, once.
    """
    global _loaded, _rows_seen
    if _loaded is not None:
        return _loaded or None
    problem = None
    with _lock:
        _rows_seen += rows
        if _loaded is None and (_rows_seen >= LOAD_AFTER_ROWS or rows < 0):
            module, problem = _load(verify) if _enabled() else (False, None)
            _loaded = module  # decided once, before any warning can raise
    if problem:
        import warnings

        warnings.warn(
            f"privembed: compiled noise kernels not used ({problem}); drawing with numpy "
            "instead (same output, slower).",
            RuntimeWarning,
            stacklevel=3,
        )
    return _loaded or None


def _load(verify: Callable[[Any], str | None] | None) -> tuple[Any, str | None]:
    """``(kernels module or False, why not or None)``."""
    try:
        _numba_cache_outside_the_package()
        from . import _jit_kernels
    except ImportError:  # numba is not installed: the documented default
        return False, None
    except Exception as exc:  # numba present but failing to set up
        return False, f"numba failed to compile them: {type(exc).__name__}: {exc}"
    if verify is not None:
        try:
            problem = verify(_jit_kernels)
        except Exception as exc:
            problem = f"their check failed: {type(exc).__name__}: {exc}"
        if problem is not None:
            return False, problem
    return _jit_kernels, None


def _numba_cache_outside_the_package() -> None:
    """numba caches compiled code beside the source (``__pycache__`` in the package, or the
    checkout) unless told otherwise: point it at privembed's cache folder, unless the user set
    ``NUMBA_CACHE_DIR`` themselves."""
    import numba

    config: Any = numba.config
    if not config.CACHE_DIR:
        from .cache import cache_dir

        config.CACHE_DIR = str(cache_dir("numba"))
