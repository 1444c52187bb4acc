"""Keyed noise: bit-identical re-release, independence across ids/configs/keys, key files."""

from __future__ import annotations

import stat

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import (
    DataError,
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    PurkayasthaMechanism,
)
from privembed.cli import app
from privembed.keyed import key_id, keygen, load_key, typed_id

KEY = bytes(range(32))
MECHS = [
    GaussianMechanism(epsilon=5.0, delta=1e-5),
    LaplaceMechanism(epsilon=20.0),
    MahalanobisMechanism(epsilon=20.0, mask=np.r_[np.ones(4), np.zeros(12)]),
    PurkayasthaMechanism(epsilon=20.0),
]


@pytest.fixture
def X() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((300, 16))


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: m.name)
def test_rerelease_is_bit_identical_and_partition_free(X, mech):
    ids = [f"doc-{i}" for i in range(len(X))]
    A = mech.privatize(X, ids=ids, key=KEY)
    B = mech.privatize(X, ids=ids, key=KEY)
    assert np.array_equal(A, B)
    # order, subsets and block size do not matter: noise depends on (key, config, id) only
    perm = np.random.default_rng(1).permutation(len(X))
    C = mech.privatize(X[perm], ids=[ids[i] for i in perm], key=KEY)
    assert np.array_equal(C, A[perm])
    D = mech.privatize(X[7], ids=ids[7], key=KEY)
    assert np.array_equal(D, A[7])


def _noise(mech, X, ids, key):
    # pre-renormalisation noise is what must be independent; use renormalize=False copies
    return mech.privatize(X, ids=ids, key=key) - X


def test_independence_across_ids_configs_and_keys():
    n, d = 400, 64
    X = np.tile(np.eye(d)[0], (n, 1))
    ids = list(range(n))
    m1 = GaussianMechanism(epsilon=5.0, delta=1e-5, renormalize=False)
    m2 = GaussianMechanism(epsilon=5.0, delta=2e-5, renormalize=False)
    base = _noise(m1, X, ids, KEY).ravel()
    others = {
        "other ids": _noise(m1, X, [i + n for i in ids], KEY).ravel(),
        "other config": _noise(m2, X, ids, KEY).ravel() * (m1.sigma / m2.sigma),
        "other key": _noise(m1, X, ids, bytes(32)).ravel(),
    }
    # |corr| of 25,600 independent pairs: sd = 1/sqrt(25600) = 0.00625; threshold 4.4 sd
    for name, other in others.items():
        r = np.corrcoef(base, other)[0, 1]
        assert abs(r) < 4.4 / np.sqrt(base.size), (name, r)
    # and rows within one release are uncorrelated too
    Z = _noise(m1, X, ids, KEY)
    r = np.corrcoef(Z[:-1].ravel(), Z[1:].ravel())[0, 1]
    assert abs(r) < 4.4 / np.sqrt(Z[1:].size)


def test_keyed_noise_has_the_mechanism_law():
    """Keyed draws come from the same exact samplers: per-coordinate sd = sigma."""
    m = GaussianMechanism(epsilon=5.0, delta=1e-5, renormalize=False)
    n, d = 2000, 32
    X = np.tile(np.eye(d)[0], (n, 1))
    Z = m.privatize(X, ids=list(range(n)), key=KEY) - X
    # sample variance of N = 64,000 normals: relative sd sqrt(2/N) = 0.0056; 4.4 sd tolerance
    assert abs(Z.var() / m.sigma**2 - 1) < 4.4 * np.sqrt(2 / Z.size)
    assert abs(Z.mean()) < 4.4 * m.sigma / np.sqrt(Z.size)


def test_typed_ids_differ():
    assert typed_id(5) != typed_id("5")
    m = LaplaceMechanism(epsilon=10.0)
    x = np.ones(8)
    assert not np.array_equal(m.privatize(x, ids=5, key=KEY), m.privatize(x, ids="5", key=KEY))


def test_keyed_argument_errors(X):
    m = LaplaceMechanism(epsilon=1.0)
    with pytest.raises(ValueError, match="ids are required with key"):
        m.privatize(X, key=KEY)
    with pytest.raises(ValueError, match="give rng or key, not both"):
        m.privatize(X, ids=range(len(X)), key=KEY, rng=0)
    with pytest.raises(DataError, match="ids must be unique"):
        m.privatize(X[:3], ids=[1, 1, 2], key=KEY)
    with pytest.raises(DataError, match="ids has 2 entries but X has 300 rows"):
        m.privatize(X, ids=[1, 2], key=KEY)
    with pytest.raises(ValueError, match="key must be at least 16 bytes"):
        m.privatize(X[:2], ids=[1, 2], key=b"short")


def test_keygen_file_permissions_and_round_trip(tmp_path):
    p = tmp_path / "k.key"
    kid = keygen(p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    key = load_key(p)
    assert len(key) == 32 and key_id(key) == kid
    with pytest.raises(FileExistsError):
        keygen(p)
    p.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_key(p)


def test_cli_keygen_and_keyed_protect(tmp_path):
    from privembed.io import read_embeddings, write_embeddings

    runner = CliRunner()
    key = tmp_path / "s.key"
    assert runner.invoke(app, ["keygen", "-o", str(key)]).exit_code == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    src = tmp_path / "e.parquet"
    Xf = np.random.default_rng(2).standard_normal((50, 8)).astype(np.float32)
    write_embeddings(src, Xf, ids=[f"r{i}" for i in range(50)])
    outs = []
    for i, rows in enumerate(("7", "50")):  # different batch sizes, same output
        out = tmp_path / f"p{i}.parquet"
        r = runner.invoke(
            app,
            [
                "protect",
                str(src),
                "-o",
                str(out),
                "-m",
                "laplace",
                "--epsilon",
                "30",
                "--key-file",
                str(key),
                "--batch-rows",
                rows,
            ],
        )
        assert r.exit_code == 0, r.output
        outs.append(read_embeddings(out))
    assert np.array_equal(outs[0].X, outs[1].X)
    assert outs[0].metadata["key_id"] == key_id(load_key(key))
    assert key.read_text().strip() not in (tmp_path / "p0.parquet").read_bytes().hex()
    npy = tmp_path / "x.npy"
    np.save(npy, Xf)
    r = runner.invoke(
        app,
        [
            "protect",
            str(npy),
            "-o",
            str(tmp_path / "o.npy"),
            "-m",
            "laplace",
            "--epsilon",
            "3",
            "--key-file",
            str(key),
        ],
    )
    assert r.exit_code == 2 and "no record ids" in r.stderr


def test_averaging_attack_gains_nothing_on_keyed_releases():
    """Averaging N fresh releases shrinks the noise by sqrt(N); keyed releases don't move."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((200, 64))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    ids = list(range(len(X)))
    m = GaussianMechanism(epsilon=5.0, delta=1e-5, renormalize=False)

    def cos_of_mean(releases):
        A = np.mean(releases, axis=0)
        return float(np.mean(np.sum(A * X, axis=1) / np.linalg.norm(A, axis=1)))

    fresh = [m.privatize(X, rng=s) for s in range(16)]
    keyed = [m.privatize(X, ids=ids, key=KEY) for _ in range(16)]
    assert cos_of_mean(fresh) > 2 * cos_of_mean(fresh[:1])  # the attack works on fresh noise
    # and gains nothing here: the average of identical vectors is that vector (up to rounding)
    assert cos_of_mean(keyed) == pytest.approx(cos_of_mean(keyed[:1]), rel=1e-12)


@pytest.mark.parametrize("name", ["aes", "chacha"])
def test_csprng_bit_generators_are_selectable_in_one_place(name):
    from privembed.rng import as_generator, bit_generator_name, use_bit_generator

    with use_bit_generator(name):
        g = as_generator(3)
        assert type(g.bit_generator).__name__ in ("AESCounter", "ChaCha")
        a = LaplaceMechanism(epsilon=5.0).privatize(np.ones((4, 8)), rng=3)
    assert bit_generator_name() == "pcg64"
    with use_bit_generator(name):
        b = LaplaceMechanism(epsilon=5.0).privatize(np.ones((4, 8)), rng=3)
    assert np.array_equal(a, b)


def test_keyed_aes_generator():
    m = LaplaceMechanism(epsilon=10.0)
    X = np.ones((5, 8))
    A = m.privatize(X, ids=range(5), key=KEY, generator="aes")
    assert np.array_equal(A, m.privatize(X, ids=range(5), key=KEY, generator="aes"))
    assert not np.array_equal(A, m.privatize(X, ids=range(5), key=KEY))
