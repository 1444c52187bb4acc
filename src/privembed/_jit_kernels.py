"""numba kernels behind :mod:`privembed._jit` (imported only through it).

Every kernel takes the numpy ``Generator`` of a :class:`~privembed.rng._PhiloxCursor` and views
of its bit generator's C state (``key_mem``: 2 uint64 words, ``ctr_mem``: 4, ``pos_mem``: the
buffer position), and positions it for row ``i`` exactly as ``_PhiloxCursor.position`` does:
key, counter ``ctrs[i]``, buffer position 4 (exhausted, so the next draw computes a fresh block).
"""

from __future__ import annotations

import numba


def _njit(fn):
    """Compiled without the GIL, cached on disk where numba finds a writable place (a
    read-only install with no writable cache folder compiles in memory instead)."""
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(fn)


@_njit
def _position(key_mem, ctr_mem, pos_mem, key, ctrs, i):
    key_mem[0] = key[0]
    key_mem[1] = key[1]
    ctr_mem[0] = ctrs[i, 0]
    ctr_mem[1] = ctrs[i, 1]
    ctr_mem[2] = ctrs[i, 2]
    ctr_mem[3] = ctrs[i, 3]
    pos_mem[0] = 4


@_njit
def normal_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out):
    """Row i of ``out`` (n, k): k standard normals from row i's stream."""
    n, k = out.shape
    for i in range(n):
        _position(key_mem, ctr_mem, pos_mem, key, ctrs, i)
        for j in range(k):
            out[i, j] = gen.standard_normal()


@_njit
def uniform_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out):
    """Row i of ``out`` (n, k): k uniforms on [0, 1) from row i's stream."""
    n, k = out.shape
    for i in range(n):
        _position(key_mem, ctr_mem, pos_mem, key, ctrs, i)
        for j in range(k):
            out[i, j] = gen.random()


@_njit
def gamma_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, shape, r):
    """``r[i]``: one standard gamma of ``shape`` from row i's stream."""
    for i in range(r.shape[0]):
        _position(key_mem, ctr_mem, pos_mem, key, ctrs, i)
        r[i] = gen.standard_gamma(shape)


@_njit
def normal_gamma_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, shape, out, r):
    """Row i: k standard normals into ``out[i]``, then one gamma into ``r[i]``, one stream."""
    n, k = out.shape
    for i in range(n):
        _position(key_mem, ctr_mem, pos_mem, key, ctrs, i)
        for j in range(k):
            out[i, j] = gen.standard_normal()
        r[i] = gen.standard_gamma(shape)
