"""Keyed noise: bit-identical re-release of the same content, independence for anything else.

Includes the attacks of the issue "Guarantees that survive ordinary use": changed content under
one id (the subtraction attack), two files of texts without ids, a new embedding model, typed
ids, and averaging.
"""

from __future__ import annotations

import json
import math
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
from privembed.data.io import read_embeddings, write_embeddings
from privembed.keys.keyed import (
    canonical_text,
    key_id,
    keygen,
    load_key,
    resolve_key,
    text_digests,
    typed_id,
    vector_digests,
)
from privembed.release import Release, protect

KEY = bytes(range(32))
MECHS = [
    GaussianMechanism(epsilon=5.0, delta=1e-5),
    LaplaceMechanism(epsilon=20.0),
    MahalanobisMechanism(epsilon=20.0, mask=np.r_[np.ones(4), np.zeros(12)]),
    PurkayasthaMechanism(epsilon=20.0),
]
#: |corr| of N independent pairs has sd 1/sqrt(N); tests use 4.4 sd (false alarm ~1e-5)
K_SE = 4.4


@pytest.fixture
def X() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((300, 16))


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: m.name)
def test_rerelease_is_bit_identical_and_partition_free(X, mech):
    ids = [f"doc-{i}" for i in range(len(X))]
    A = protect(X, mech, ids=ids, key=KEY)
    B = protect(X, mech, ids=ids, key=KEY)
    assert np.array_equal(A, B)
    # order, subsets, block size and threads do not matter
    perm = np.random.default_rng(1).permutation(len(X))
    C = protect(X[perm], mech, ids=[ids[i] for i in perm], key=KEY)
    assert np.array_equal(C, A[perm])
    D = protect(X[7], mech, ids=ids[7], key=KEY)
    assert np.array_equal(D, A[7])
    with Release(mech, key=KEY) as rel:
        parts = [rel.protect(X[s : s + 37], ids[s : s + 37]) for s in range(0, len(X), 37)]
    assert np.array_equal(np.concatenate(parts), A)


def _noise(mech, X, ids, key, **kw):
    return protect(X, mech, ids=ids, key=key, **kw) - X


def test_independence_across_ids_configs_keys_models_and_generators():
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
        "other model": _noise(m1, X, ids, KEY, model="another-model").ravel(),
        "other generator": _noise(m1, X, ids, KEY, generator="aes").ravel(),
    }
    for name, other in others.items():
        r = np.corrcoef(base, other)[0, 1]
        assert abs(r) < K_SE / np.sqrt(base.size), (name, r)


def test_changed_content_under_one_id_gets_independent_noise():
    """The subtraction attack: two releases of one id with different contents.

    With noise bound to (key, config, id) only, Y2 - Y1 = X2 - X1 exactly and whoever knows X1
    recovers X2. Bound to content too, the difference must correlate with the clean difference
    no more than the difference of two *fresh* releases does.
    """
    rng = np.random.default_rng(3)
    n, d = 500, 64
    X1 = rng.standard_normal((n, d))
    X1 /= np.linalg.norm(X1, axis=1, keepdims=True)
    X2 = rng.standard_normal((n, d))
    X2 /= np.linalg.norm(X2, axis=1, keepdims=True)  # "edited notes" under the same ids
    ids = [f"note-{i}" for i in range(n)]
    m = GaussianMechanism(epsilon=5.0, delta=1e-5, renormalize=False)
    keyed = protect(X2, m, ids=ids, key=KEY) - protect(X1, m, ids=ids, key=KEY)
    fresh = m.privatize(X2, rng=11) - m.privatize(X1, rng=12)

    def recovery(diff: np.ndarray) -> float:
        """Mean cosine between the released difference and the clean difference."""
        clean = X2 - X1
        num = np.einsum("ij,ij->i", diff, clean)
        return float(np.mean(num / (np.linalg.norm(diff, axis=1) * np.linalg.norm(clean, axis=1))))

    # the noise differences themselves are uncorrelated (independent draws)
    Z1 = protect(X1, m, ids=ids, key=KEY) - X1
    Z2 = protect(X2, m, ids=ids, key=KEY) - X2
    r = np.corrcoef(Z1.ravel(), Z2.ravel())[0, 1]
    assert abs(r) < K_SE / np.sqrt(Z1.size), r
    # so the attacker's recovery is that of fresh noise, not ~1.0
    rk, rf = recovery(keyed), recovery(fresh)
    se = 1 / math.sqrt(n)
    assert rk < 0.5 and abs(rk - rf) < K_SE * 2 * se, (rk, rf)


def test_same_content_same_id_is_identical_even_from_another_batch():
    m = LaplaceMechanism(epsilon=20.0)
    X = np.random.default_rng(4).standard_normal((10, 16))
    ids = list(range(10))
    A = protect(X, m, ids=ids, key=KEY)
    B = protect(np.vstack([X[5:], X[:5]]), m, ids=ids[5:] + ids[:5], key=KEY)
    assert np.array_equal(A, np.vstack([B[5:], B[:5]]))


def test_typed_ids_and_canonical_forms():
    assert typed_id(5) != typed_id("5")
    assert typed_id(np.int64(5)) == typed_id(5) == b"i:5"
    for bad in (1.0, True, None, np.float64(2.0)):
        with pytest.raises(TypeError, match="record id must be an int or a string"):
            typed_id(bad)
    m = LaplaceMechanism(epsilon=10.0)
    x = np.ones(8)
    assert not np.array_equal(protect(x, m, ids=5, key=KEY), protect(x, m, ids="5", key=KEY))
    assert np.array_equal(protect(x, m, ids=5, key=KEY), protect(x, m, ids=np.int64(5), key=KEY))
    # -0.0 and 0.0 are one content; float64 rows equal in float32 are one content
    a = np.array([[0.0, 1.0, 2.0]])
    assert vector_digests(a) == vector_digests(np.array([[-0.0, 1.0, 2.0]]))
    assert vector_digests(a) != vector_digests(np.array([[0.0, 1.0, 2.5]]))
    assert canonical_text(" A\u00a0 b\n") == "A b"
    # content is the exact text (whitespace variants may embed differently); model bound too
    assert text_digests(["A b"], "m") == text_digests(["A b"], "m")
    assert text_digests(["A  b"], "m") != text_digests(["A b"], "m") != text_digests(["A b"], "n")


def test_keyed_argument_errors(X):
    m = LaplaceMechanism(epsilon=1.0)
    with pytest.raises(DataError, match="need record ids"):
        protect(X, m, key=KEY)
    with pytest.raises(ValueError, match="give a seed or a key, not both"):
        protect(X, m, ids=range(len(X)), key=KEY, rng=0)
    with pytest.raises(DataError, match=r"unique within one release; repeated: 1 "):
        protect(X[:3], m, ids=[1, 1, 2], key=KEY)
    with pytest.raises(DataError, match="ids has 2 entries but there are 300 rows"):
        protect(X, m, ids=[1, 2], key=KEY)
    with pytest.raises(ValueError, match="key must be at least 16 bytes"):
        protect(X[:2], m, ids=[1, 2], key=b"short")
    with pytest.raises(TypeError, match="load_key"):
        protect(X[:2], m, ids=[1, 2], key=12345)
    with pytest.raises(DataError, match=r"row 1: record id must be an int or a string, got 2\.0"):
        protect(X[:2], m, ids=[1, 2.0], key=KEY)


def test_duplicate_ids_are_refused_across_batches(X):
    m = LaplaceMechanism(epsilon=1.0)
    with Release(m, key=KEY) as rel:
        rel.protect(X[:10], [f"a{i}" for i in range(10)])
        with pytest.raises(DataError, match="repeated: 'a3'"):
            rel.protect(X[10:12], ["b", "a3"])


def test_key_as_path_bytes_or_loaded(tmp_path, X):
    p = tmp_path / "k.key"
    keygen(p)
    key = load_key(p)
    m = LaplaceMechanism(epsilon=5.0)
    a = protect(X[:4], m, ids=[1, 2, 3, 4], key=p)
    b = protect(X[:4], m, ids=[1, 2, 3, 4], key=str(p))
    c = protect(X[:4], m, ids=[1, 2, 3, 4], key=key)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert resolve_key(p) == key


def test_keygen_file_permissions_and_round_trip(tmp_path):
    p = tmp_path / "k.key"
    kid = keygen(p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    key = load_key(p)
    assert len(key) == 32 and key_id(key) == kid
    with pytest.raises(FileExistsError):
        keygen(p)
    for mode in (0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o601):  # group or others, any bit
        p.chmod(mode)
        with pytest.raises(PermissionError, match="chmod 600"):
            load_key(p)
    p.chmod(0o400)  # read-only for the owner is fine
    assert load_key(p) == key


def _protect_cli(runner, *args):
    return runner.invoke(app, ["protect", *map(str, args)])


def test_cli_keygen_and_keyed_protect(tmp_path):
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
        r = _protect_cli(
            runner, src, "-o", out, "-m", "laplace", "--epsilon", 30, "--key-file", key,
            "--batch-rows", rows,
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        outs.append(read_embeddings(out))
    assert np.array_equal(outs[0].X, outs[1].X)
    assert outs[0].metadata["key_id"] == key_id(load_key(key))
    assert key.read_text().strip() not in (tmp_path / "p0.parquet").read_bytes().hex()
    npy = tmp_path / "x.npy"
    np.save(npy, Xf)
    r = _protect_cli(runner, npy, "-o", tmp_path / "o.npy", "-m", "laplace", "--epsilon", 3,
                     "--key-file", key)  # fmt: skip
    said = " ".join(r.stderr.split())
    assert r.exit_code == 2 and "need record ids" in said and "--id-field" in said
    assert not (tmp_path / "o.npy").exists()


def test_cli_two_text_files_without_ids_are_refused_then_bound_to_content(tmp_path):
    """Line numbers are not ids: two files' line 1 used to share one record's noise."""
    runner = CliRunner()
    key = tmp_path / "s.key"
    keygen(key)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"text": "the patient has diabetes"}) + "\n")
    b.write_text(json.dumps({"text": "the patient has cancer"}) + "\n")
    r = _protect_cli(runner, a, "-o", tmp_path / "oa.parquet", "-m", "gaussian", "--epsilon", 5,
                     "--delta", 1e-5, "--key-file", key)  # fmt: skip
    said = " ".join(r.stderr.split())
    assert r.exit_code == 2 and "line numbers are not ids" in said
    assert "--ids-from-content" in said and not (tmp_path / "oa.parquet").exists()


def test_cli_edited_note_is_charged_and_gets_new_noise(tmp_path):
    """An edited note under the same id: fresh noise, charged; unchanged notes free."""
    runner = CliRunner()
    key = tmp_path / "s.key"
    keygen(key)
    rng = np.random.default_rng(6)
    X = rng.standard_normal((20, 16)).astype(np.float32)
    ids = [f"n{i}" for i in range(20)]
    v1, v2 = tmp_path / "v1.parquet", tmp_path / "v2.parquet"
    write_embeddings(v1, X, ids=ids)
    X2 = X.copy()
    X2[3] = rng.standard_normal(16)
    write_embeddings(v2, X2, ids=ids)
    led = tmp_path / "l.db"
    common = ["-m", "gaussian", "--epsilon", 5, "--delta", 1e-5, "--key-file", key,
              "--ledger", led, "--renormalize"]  # fmt: skip
    r1 = _protect_cli(runner, v1, "-o", tmp_path / "o1.parquet", *common)
    assert r1.exit_code == 0, r1.output
    r2 = _protect_cli(runner, v2, "-o", tmp_path / "o2.parquet", *common)
    assert r2.exit_code == 0, r2.output
    said = " ".join(r2.stderr.split())
    assert "19 free" in said and "1 record(s) charged" in said, said
    Y1 = read_embeddings(tmp_path / "o1.parquet").X
    Y2 = read_embeddings(tmp_path / "o2.parquet").X
    same = [i for i in range(20) if i != 3]
    assert np.array_equal(Y1[same], Y2[same])
    assert not np.array_equal(Y1[3], Y2[3])
    from privembed.keys.ledger import Ledger

    with Ledger(led, readonly=True) as L:
        spent = {s.record_id: s for s in L.spent(["n3", "n4"])}
    assert spent["s:n3"].releases == 2 and spent["s:n3"].free_releases == 0
    assert spent["s:n4"].free_releases == 1


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
    keyed = [protect(X, m, ids=ids, key=KEY) for _ in range(16)]
    assert cos_of_mean(fresh) > 2 * cos_of_mean(fresh[:1])  # the attack works on fresh noise
    assert cos_of_mean(keyed) == pytest.approx(cos_of_mean(keyed[:1]), rel=1e-12)


@pytest.mark.parametrize("name", ["aes", "chacha"])
def test_csprng_bit_generators_are_selectable_in_one_place(name):
    from privembed.core.rng import as_generator, bit_generator_name, use_bit_generator

    with use_bit_generator(name):
        g = as_generator(3)
        assert type(g.bit_generator).__name__ in ("AESCounter", "ChaCha")
        a = LaplaceMechanism(epsilon=5.0).privatize(np.ones((4, 8)), rng=3)
        with Release(LaplaceMechanism(epsilon=5.0), key=KEY) as rel:
            assert rel.generator == "aes"  # the CSPRNG policy reaches keyed noise
    assert bit_generator_name() == "pcg64"
    with use_bit_generator(name):
        b = LaplaceMechanism(epsilon=5.0).privatize(np.ones((4, 8)), rng=3)
    assert np.array_equal(a, b)


def test_keyed_aes_generator():
    m = LaplaceMechanism(epsilon=10.0)
    X = np.random.default_rng(1).standard_normal((5, 8))
    A = protect(X, m, ids=range(5), key=KEY, generator="aes")
    assert np.array_equal(A, protect(X, m, ids=range(5), key=KEY, generator="aes"))
    assert not np.array_equal(A, protect(X, m, ids=range(5), key=KEY))


def test_cli_generator_options(tmp_path):
    runner = CliRunner()
    key = tmp_path / "s.key"
    keygen(key)
    src = tmp_path / "e.parquet"
    write_embeddings(src, np.random.default_rng(2).standard_normal((6, 8)), ids=list(range(6)))
    outs = {}
    for name, extra in (("philox", []), ("aes", ["--generator", "aes"]),
                        ("policy", ["--bit-generator", "aes"])):  # fmt: skip
        out = tmp_path / f"{name}.parquet"
        r = _protect_cli(runner, src, "-o", out, "-m", "laplace", "--epsilon", 9,
                         "--key-file", key, *extra)  # fmt: skip
        assert r.exit_code == 0, r.output
        outs[name] = read_embeddings(out)
    assert outs["aes"].metadata["keyed_generator"] == "aes"
    assert np.array_equal(outs["aes"].X, outs["policy"].X)
    assert not np.array_equal(outs["aes"].X, outs["philox"].X)


def test_the_tag_mac_is_hmac_sha256():
    """_HmacPrefix (hashlib states copied per record) equals HMAC-SHA256: RFC 4231 test cases
    1 and 6 (a 131-byte key, hashed first), and the hmac module on a prefix + message split."""
    import hmac

    from privembed.keys.keyed import _HmacPrefix

    assert _HmacPrefix(b"\x0b" * 20, b"").digest(b"Hi There").hex() == (
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    )
    msg = b"Test Using Larger Than Block-Size Key - Hash Key First"
    assert _HmacPrefix(b"\xaa" * 131, msg[:10]).digest(msg[10:20], msg[20:]).hex() == (
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    )
    key = bytes(range(32))
    assert _HmacPrefix(key, b"ctx\x00").digest(b"i:5", b"\x00v", b"\x01" * 1536) == hmac.digest(
        key, b"ctx\x00i:5\x00v" + b"\x01" * 1536, "sha256"
    )


# ---- the fast paths of id typing and tags give the same bits ---------------------------------
@pytest.mark.parametrize(
    "ids",
    [
        [f"doc-{i}" for i in range(50)],
        ["a\x00b", "é", "", "x" * 300],
        ["ok", "lone \ud800 surrogate"],  # not UTF-8: the general path (surrogateescape)
        list(range(-5, 45)),
        [2**70, -(2**70), 0],
        np.arange(50, dtype=np.int64),
        np.arange(50, dtype=np.int32),
        np.array([2**64 - 1, 0], dtype=np.uint64),
        np.array(["a", "é", ""]),
        [np.int64(3), 4, "5"],  # mixed: the general path
        range(7),
        (1, 2, 3),
    ],
    ids=lambda v: type(v).__name__ + (str(v.dtype) if isinstance(v, np.ndarray) else ""),
)
def test_id_typing_fast_paths_equal_the_ledger_keys(ids):
    from privembed.keys.ledger import record_key

    with Release(LaplaceMechanism(epsilon=5.0), key=KEY) as rel:
        assert rel._typed_keys(ids, len(ids)) == [record_key(r) for r in list(ids)]


@pytest.mark.parametrize("bad", [[1, True], np.array([True, False]), [1.0, 2.0], [[1], [2]]])
def test_id_typing_refuses_what_record_keys_refuse(bad):
    with Release(LaplaceMechanism(epsilon=5.0), key=KEY) as rel:
        with pytest.raises(DataError, match="record id must be an int or a string"):
            rel._typed_keys(bad, len(bad))


def test_keyed_noise_is_the_same_for_every_form_of_the_same_ids(X):
    m = GaussianMechanism(epsilon=5.0, delta=1e-5)
    ref = protect(X, m, ids=list(range(len(X))), key=KEY)
    for ids in (np.arange(len(X)), np.arange(len(X), dtype=np.uint32), range(len(X))):
        assert np.array_equal(protect(X, m, ids=ids, key=KEY), ref)
    names = [f"n{i}" for i in range(len(X))]
    assert np.array_equal(
        protect(X, m, ids=np.array(names), key=KEY), protect(X, m, ids=names, key=KEY)
    )


def test_stream_keys_are_the_first_half_of_each_tag_on_every_path():
    """keyed_source reads tags[i][:16] as two little-endian words, from a block's tag array,
    from a list of 32-byte tags, or from tags of other lengths alike."""
    import hmac as _hmac
    import pickle

    from privembed.core import _jit
    from privembed.core.rng import _verify_kernels
    from privembed.keys import keyed

    assert _jit.kernels(-1, verify=_verify_kernels) is not None  # the compiled tags (extra fast)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 8)).astype(np.float32)
    ids = [f"r{i}".encode() for i in range(300)]
    tags = keyed.vector_tags(KEY, b"ctx", ids, X)
    assert isinstance(tags, keyed._Tags)  # a block's tags keep their array
    assert pickle.loads(pickle.dumps(tags)) == tags
    assert keyed._hashlib_vector_tags(KEY, b"ctx", ids, X) == tags
    ref = [  # HMAC-SHA256 over (domain, context, typed id, "v", canonical float32 bytes)
        _hmac.digest(KEY, keyed._DOMAIN + b"ctx\x00" + r + b"\x00v" + x.tobytes(), "sha256")
        for r, x in zip(ids, X.astype("<f4"), strict=True)
    ]
    assert list(tags) == ref
    want = np.frombuffer(b"".join(t[:16] for t in ref), dtype="<u8").reshape(-1, 2)
    for given in (tags, list(tags), [t + b"\x01" for t in ref]):
        src = keyed.keyed_source(KEY, given)
        assert np.array_equal(src._ctr[:, 2:], want)
