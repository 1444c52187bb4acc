"""The compiled per-record kernels (numba, extra ``fast``) draw exactly what the Python loop
draws, row for row, for every CounterSource method; keyed releases are unchanged by them."""

from __future__ import annotations

import numpy as np
import pytest

from privembed.core import _jit
from privembed.core.rng import CounterSource, _verify_kernels


@pytest.fixture(scope="module")
def kernels():
    k = _jit.kernels(-1, verify=_verify_kernels)  # load now, whatever the row count so far
    assert k is not None, "numba is part of the test environment (extra 'fast')"
    return k


def _source(n: int, seed: int = 0) -> CounterSource:
    rows = np.random.default_rng(seed).integers(0, 1 << 64, size=(n, 2), dtype=np.uint64)
    return CounterSource(bytes(range(16)), rows)


def _both(monkeypatch, draw):
    """``draw(source)`` through the kernels and through the Python loop, on equal sources."""
    compiled = draw(_source(257))
    with monkeypatch.context() as m:
        m.setattr(CounterSource, "_kernel", lambda self, name: None)
        looped = draw(_source(257))
    return compiled, looped


@pytest.mark.parametrize("d", [1, 2, 3, 16, 384])
def test_every_method_matches_the_python_loop_bit_for_bit(kernels, monkeypatch, d):
    def calls(src):  # several calls on one source: the call counter must advance alike
        return (
            src.normal(257, d),
            src.uniform(257, 2),
            src.gamma(float(d), 257),
            *src.normal_gamma(257, d, float(d)),
            src.gamma(0.5, 257),
        )

    compiled, looped = _both(monkeypatch, calls)
    for a, b in zip(compiled, looped, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_kernels_are_used_and_rows_do_not_depend_on_their_neighbours(kernels, monkeypatch):
    used = []
    real = CounterSource._kernel

    def spy(self, name):
        run = real(self, name)
        used.append(run is not None)
        return run

    monkeypatch.setattr(CounterSource, "_kernel", spy)
    src = _source(100)
    whole = src.normal(100, 8)
    rows = np.random.default_rng(0).integers(0, 1 << 64, size=(100, 2), dtype=np.uint64)
    part = CounterSource(bytes(range(16)), rows[40:60]).normal(20, 8)
    np.testing.assert_array_equal(whole[40:60], part)
    assert used and all(used)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setattr(_jit, "_loaded", None)
    monkeypatch.setenv("PRIVEMBED_JIT", "0")
    assert _jit.kernels(-1) is None


def test_kernels_that_drift_from_numpy_are_refused(kernels):
    """Keyed noise must not depend on whether numba is installed: were a numba release to draw
    differently, the ledger would record the changed noise of an unchanged record as free."""
    from types import SimpleNamespace

    def drifting(gen, km, cm, pm, key, ctrs, out):
        kernels.normal_rows(gen, km, cm, pm, key, ctrs, out)
        out[-1, -1] = np.nextafter(out[-1, -1], np.inf)  # one ulp, one value

    fake = SimpleNamespace(**{n: getattr(kernels, n) for n in dir(kernels) if n.endswith("_rows")})
    assert _verify_kernels(fake) is None
    fake.normal_rows = drifting
    assert "do not reproduce numpy" in (_verify_kernels(fake) or "")


def test_gamma_shapes_the_kernels_do_not_take_behave_as_numpy(kernels):
    rows = np.zeros((3, 2), dtype=np.uint64)
    src = CounterSource(bytes(16), rows)
    assert np.isnan(src.gamma(float("nan"), 3)).all()  # numpy's answer; no endless rejection loop
    with pytest.raises(ValueError, match="shape"):
        src.gamma(-1.0, 3)
    u, g = CounterSource(bytes(16), rows).normal_gamma(3, 2, float("nan"))
    assert np.isnan(g).all() and np.isfinite(u).all()


def test_without_a_writable_cache_the_kernels_compile_in_memory(monkeypatch):
    import numba

    from privembed.core import _jit_kernels

    real = numba.njit

    def njit(**kw):
        if kw.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x.py'")
        return real(**kw)

    monkeypatch.setattr(numba, "njit", njit)
    f = _jit_kernels._njit(lambda a: a + 1)
    assert f(1) == 2


def test_a_failing_self_check_warns_once_and_falls_back(monkeypatch):
    monkeypatch.setattr(_jit, "_loaded", None)
    refuse = lambda k: "they do not reproduce numpy's draws"  # noqa: E731
    with pytest.warns(RuntimeWarning, match="do not reproduce numpy"):
        assert _jit.kernels(-1, verify=refuse) is None
    assert (
        _jit.kernels(-1, verify=refuse) is None
    )  # decided: no second warning (warnings are errors here)


def test_a_release_told_its_size_loads_the_kernels_up_front(monkeypatch):
    from privembed import LaplaceMechanism
    from privembed.release import Release

    monkeypatch.setattr(_jit, "_loaded", None)
    monkeypatch.setattr(_jit, "_rows_seen", 0)
    with Release(LaplaceMechanism(epsilon=5.0)) as rel:  # fresh noise draws no counter rows
        rel.expect_rows(10 * _jit.LOAD_AFTER_ROWS)
        assert _jit._loaded is None
    with Release(LaplaceMechanism(epsilon=5.0), key=bytes(32)) as rel:
        rel.expect_rows(1_000)
        assert _jit._loaded is None  # too few rows to pay for loading
        rel.expect_rows(_jit.LOAD_AFTER_ROWS)
        assert _jit._loaded not in (None, False)


@pytest.mark.parametrize("key_len", [16, 32, 64, 65, 100])
@pytest.mark.parametrize("d", [1, 3, 384])
def test_compiled_tags_equal_hashlib_tags(kernels, key_len, d):
    from privembed.keys import keyed

    assert keyed._compiled_hmac() is not None, "libcrypto's SHA-256 is reachable here"
    rng = np.random.default_rng(d)
    X = rng.standard_normal((200, d)).astype(np.float32)
    X[3, 0] = -0.0  # canonicalised to +0.0 in both paths
    ids = [7, "x", b"", "é" * 40, *(f"doc-{i}" for i in range(196))]
    key = bytes(rng.integers(0, 256, size=key_len, dtype=np.uint8))
    got = keyed.vector_tags(key, b"ctx", ids, X)
    want = keyed._hashlib_vector_tags(key, b"ctx", ids, X + np.float32(0.0))
    assert got == want and len(got) == 200 and all(len(t) == 32 for t in got)


def test_compiled_tags_that_drift_are_refused(kernels, monkeypatch):
    from privembed.keys import keyed

    real = keyed._compiled_vector_tags

    def drifting(k, key, context, ids, A):
        out = real(k, key, context, ids, A)
        return [out[0][:-1] + bytes([out[0][-1] ^ 1]), *out[1:]]

    monkeypatch.setattr(keyed, "_hmac_checked", None)
    monkeypatch.setattr(keyed, "_compiled_vector_tags", drifting)
    assert keyed._compiled_hmac() is None
    X = np.ones((100, 4), dtype=np.float32)
    ids = [f"r{i}" for i in range(100)]
    assert keyed.vector_tags(bytes(32), b"c", ids, X) == keyed._hashlib_vector_tags(
        bytes(32), b"c", ids, X
    )


def test_without_libcrypto_tags_come_from_hashlib(kernels, monkeypatch):
    from privembed.keys import keyed

    monkeypatch.setattr(kernels, "HAVE_HMAC", False)
    monkeypatch.setattr(keyed, "_hmac_checked", None)
    assert keyed._compiled_hmac() is None
    calls = []
    monkeypatch.setattr(keyed, "_compiled_vector_tags", lambda *a: calls.append(a))
    X = np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32)
    ids = [f"r{i}" for i in range(100)]
    assert keyed.vector_tags(bytes(32), b"c", ids, X) == keyed._hashlib_vector_tags(
        bytes(32), b"c", ids, X
    )
    assert not calls


def test_hmac_kernel_refuses_arguments_that_do_not_fit(kernels):
    ctx = np.zeros(kernels.SHA_CTX_BYTES, dtype=np.uint8)
    rows = np.zeros((1, 8), dtype=np.uint8)
    out = np.empty((1, 32), dtype=np.uint8)
    sfx = np.frombuffer(b"\x00v", dtype=np.uint8)
    idbuf = np.frombuffer(b"ab", dtype=np.uint8)
    for idoff in ([0, 40], [0], [1, 2], [0, 2, 1]):
        with pytest.raises(ValueError, match="idoff"):
            kernels.hmac_rows(ctx, ctx, idbuf, np.array(idoff, np.int64), sfx, rows, out)
    with pytest.raises(ValueError, match="contiguous"):
        wide = np.zeros((1, 16), dtype=np.uint8)
        kernels.hmac_rows(ctx, ctx, idbuf, np.array([0, 2]), sfx, wide[:, ::2], out)
    with pytest.raises(ValueError, match="SHA256_CTX"):
        kernels.hmac_rows(ctx[:64], ctx[:64], idbuf, np.array([0, 2]), sfx, rows, out)


def test_vector_tags_edge_shapes_and_byte_order(kernels):
    from privembed.keys import keyed

    assert keyed.vector_tags(bytes(32), b"c", [], np.zeros((0, 8), np.float32)) == []
    with pytest.raises(ValueError, match="at least one column"):
        keyed.vector_tags(bytes(32), b"c", [f"r{i}" for i in range(70)], np.zeros((70, 0)))
    X = np.random.default_rng(2).standard_normal((70, 6)).astype("<f4")
    ids = [f"r{i}" for i in range(70)]
    assert keyed.vector_tags(bytes(32), b"c", ids, X) == keyed.vector_tags(
        bytes(32), b"c", ids, X.astype(">f4")
    )
    assert keyed.vector_digests(X) == keyed.vector_digests(X.astype(">f8"))
