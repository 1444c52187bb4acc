"""numba kernels behind :mod:`privembed.core._jit` (imported only through it).

Every kernel takes the numpy ``Generator`` of a :class:`~privembed.core.rng._PhiloxCursor` and views
of its bit generator's C state (``key_mem``: 2 uint64 words, ``ctr_mem``: 4, ``pos_mem``: the
buffer position), and positions it for row ``i`` exactly as ``_PhiloxCursor.position`` does:
key, counter ``ctrs[i]``, buffer position 4 (exhausted, so the next draw computes a fresh block).
"""

# mypy: disable-error-code="call-overload"

from __future__ import annotations

import numba
import numpy as np


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
def _fill(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out, uniform):
    """Row i of ``out`` (n, k): k draws from row i's stream, uniforms on [0, 1) if ``uniform``
    else standard normals (the flag is the same for every draw: the branch costs nothing
    next to the draw)."""
    n, k = out.shape
    for i in range(n):
        _position(key_mem, ctr_mem, pos_mem, key, ctrs, i)
        for j in range(k):
            out[i, j] = gen.random() if uniform else gen.standard_normal()


@_njit
def normal_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out):
    """Row i of ``out`` (n, k): k standard normals from row i's stream."""
    _fill(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out, False)


@_njit
def uniform_rows(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out):
    """Row i of ``out`` (n, k): k uniforms on [0, 1) from row i's stream."""
    _fill(gen, key_mem, ctr_mem, pos_mem, key, ctrs, out, True)


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


# ---- content tags: HMAC-SHA256 through libcrypto's SHA-256, without the GIL --------------------
# hashlib holds the GIL for messages under 2,048 bytes (a 384-d float32 row is 1,536), so keyed
# tags computed in Python run one thread at a time. The same libcrypto that backs hashlib is
# called here from compiled code (its SHA256_* functions: SHA-NI where the CPU has it), with the
# keyed pads and the shared prefix absorbed once; privembed.keys.keyed checks the bytes against
# hashlib before first use.

_SHA_SYMBOLS = ("SHA256_Init", "SHA256_Update", "SHA256_Final")
#: bytes reserved for an OpenSSL SHA256_CTX (112 on LP64 platforms)
SHA_CTX_BYTES = 256


def _load_libcrypto() -> bool:
    """Make libcrypto's SHA-256 functions visible to compiled code (False if absent: a missing
    symbol must be found here, not when LLVM links the kernel)."""
    import ctypes
    import ctypes.util

    import llvmlite.binding as llvm

    name = ctypes.util.find_library("crypto")
    if name is None:
        return False
    try:
        lib = ctypes.CDLL(name)
        if not all(hasattr(lib, s) for s in _SHA_SYMBOLS):
            return False
        llvm.load_library_permanently(name)
    except (OSError, RuntimeError):
        return False
    return True


HAVE_HMAC = _load_libcrypto()

if HAVE_HMAC:
    _vp = numba.types.voidptr
    _Init = numba.types.ExternalFunction("SHA256_Init", numba.types.intc(_vp))
    _Update = numba.types.ExternalFunction(
        "SHA256_Update", numba.types.intc(_vp, _vp, numba.types.uintp)
    )
    _Final = numba.types.ExternalFunction("SHA256_Final", numba.types.intc(_vp, _vp))

    @_njit
    def sha256_state(first, then, ctx):
        """``ctx``: the SHA-256 state after absorbing ``first`` and then ``then`` (uint8)."""
        _Init(ctx.ctypes.data)
        _Update(ctx.ctypes.data, first.ctypes.data, first.shape[0])
        if then.shape[0]:
            _Update(ctx.ctypes.data, then.ctypes.data, then.shape[0])

    @_njit
    def hmac_rows(inner, outer, idbuf, idoff, suffix, rows, out):
        """``out[i]`` = the HMAC whose inner state (key ^ ipad, then the shared prefix) is
        ``inner`` and outer state (key ^ opad) is ``outer``, of
        ``idbuf[idoff[i]:idoff[i+1]] ‖ suffix ‖ rows[i]``; ``rows`` (n, w) and ``out`` (n, 32)
        uint8."""
        n, w = rows.shape
        # the C calls below trust these: check them (O(n), next to the hashing)
        if idoff.shape[0] != n + 1 or idoff[0] != 0 or idoff[n] > idbuf.shape[0]:
            raise ValueError("hmac_rows: idoff does not describe idbuf")
        for i in range(n):
            if idoff[i + 1] < idoff[i]:
                raise ValueError("hmac_rows: idoff must be non-decreasing")
        if out.shape[0] != n or out.shape[1] != 32:
            raise ValueError("hmac_rows: out must have shape (n, 32)")
        if inner.shape[0] != outer.shape[0] or inner.shape[0] < 112:
            raise ValueError("hmac_rows: inner and outer must be SHA256_CTX buffers")
        if n > 0 and (rows.strides[0] != w or rows.strides[1] != 1):
            raise ValueError("hmac_rows: rows must be C-contiguous")
        ctx = np.empty(inner.shape[0], dtype=np.uint8)
        dig = np.empty(32, dtype=np.uint8)
        base = idbuf.ctypes.data
        for i in range(n):
            ctx[:] = inner
            c = ctx.ctypes.data
            a = idoff[i]
            if idoff[i + 1] > a:
                _Update(c, base + a, idoff[i + 1] - a)
            _Update(c, suffix.ctypes.data, suffix.shape[0])
            _Update(c, rows[i].ctypes.data, w)
            _Final(dig.ctypes.data, c)
            ctx[:] = outer
            _Update(c, dig.ctypes.data, 32)
            _Final(out[i].ctypes.data, c)
