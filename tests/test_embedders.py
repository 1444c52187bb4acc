"""Embedding backends: ONNX Runtime (fp32, int8) against the torch model, the export cache.

The ONNX model is exported once per test session into a temporary cache (about 10-30 s).
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from privembed import DataError
from privembed.data.embedders import Embedder, export_onnx, onnx_cache_dir

pytestmark = pytest.mark.slow

TEXTS = [
    "the patient has diabetes",
    "the patient has diabetes mellitus and takes metformin twice a day",
    "stock markets fell sharply",
    "Ça coûte 15 € — naïve café déjà vu, Straße, 東京 🙂",
    "a",
    "To dishonor. Shall flight abuse your name? --Shak.",
    # longer than max_seq_length (256) tokens: truncated the same way on both paths
    " ".join(["Liberty may be endangered by the abuses of liberty as well as of power."] * 30),
]


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("privembed-cache")
    export_onnx(cache_dir=root, quantize=True)
    return root


@pytest.fixture(scope="session")
def torch_embedder():
    return Embedder(backend="torch")


@pytest.fixture(scope="session")
def onnx_embedder(cache):
    return Embedder(backend="onnx", cache_dir=cache, batch_size=3)


def test_onnx_matches_torch(onnx_embedder, torch_embedder):
    X = onnx_embedder.encode(TEXTS)
    T = torch_embedder.encode(TEXTS)
    assert X.shape == T.shape == (len(TEXTS), 384) and X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    cos = np.sum(X * T, axis=1)
    assert cos.min() >= 0.9999, cos
    # the same tokens reach the model (special tokens included, truncated at 256)
    counts = onnx_embedder.count_tokens(TEXTS)
    assert counts == torch_embedder.count_tokens(TEXTS) and counts[-1] == 256
    assert onnx_embedder.max_seq_length == torch_embedder.max_seq_length == 256


def test_order_restored_after_length_sorting(onnx_embedder):
    X = onnx_embedder.encode(TEXTS)
    perm = np.random.default_rng(0).permutation(len(TEXTS))
    Y = onnx_embedder.encode([TEXTS[i] for i in perm])
    np.testing.assert_allclose(Y, X[perm], atol=1e-5)
    # each row is its own text's vector: one text at a time gives the same rows
    alone = np.stack([onnx_embedder.encode(t) for t in TEXTS])
    np.testing.assert_allclose(alone, X, atol=1e-5)


def test_progress_counts_rows(onnx_embedder, torch_embedder):
    texts = [f"sentence number {i} about {'x ' * (i % 5)}" for i in range(10)]
    for emb in (onnx_embedder, torch_embedder):
        seen: list[int] = []
        emb.encode(texts, on_progress=seen.append)
        steps = np.diff([0, *seen])
        # cumulative rows after each batch of at most batch_size texts, ending at all of them
        assert seen[-1] == 10 and steps.min() >= 1 and steps.max() <= emb.batch_size, seen
    seen = []
    onnx_embedder.encode(TEXTS[-1:] * 9, on_progress=seen.append)  # 256 tokens each
    assert seen == [2, 4, 6, 8, 9]  # two texts of 256 tokens fill a call
    with pytest.raises(TypeError, match="on_progress must be callable"):
        onnx_embedder.encode(texts, on_progress=3)
    with pytest.raises(DataError, match="empty or non-string"):
        onnx_embedder.encode(["ok", " "])


def test_metadata_records_backend(onnx_embedder, torch_embedder, cache):
    meta = onnx_embedder.metadata()
    assert meta.pop("embedding_model_identity").startswith("all-MiniLM-L6-v2@")
    assert meta == {
        "embedding_model": "all-MiniLM-L6-v2",
        "dim": 384,
        "normalized": True,
        "embedding_backend": "onnx",
    }
    assert torch_embedder.metadata()["embedding_backend"] == "torch"
    assert torch_embedder.metadata()["embedding_model"] == "all-MiniLM-L6-v2"
    # auto picks onnx where onnxruntime is installed
    assert Embedder(cache_dir=cache).backend == "onnx"


def test_int8_runs_and_is_named_apart(cache, onnx_embedder):
    q = Embedder(quantize=True, cache_dir=cache)
    assert q.backend == "onnx-int8" and Embedder(backend="onnx-int8", cache_dir=cache).backend == (
        "onnx-int8"
    )
    md = q.metadata()
    assert md["embedding_model"] == "all-MiniLM-L6-v2+onnx-int8"
    assert md["embedding_quantization"] == "int8-dynamic-per-channel"
    X = q.encode(TEXTS)
    assert X.shape == (len(TEXTS), 384) and X.dtype == np.float32
    cos = np.sum(X * onnx_embedder.encode(TEXTS), axis=1)
    # int8 changes the vectors a little (measured mean about 0.99 on dictionary definitions)
    assert 0.95 < cos.mean() < 1.0 and cos.min() > 0.9, cos
    # activations are quantised per call: each text runs alone, so its vector is the same
    # whatever it is embedded with (bit for bit)
    np.testing.assert_array_equal(np.stack([q.encode(t) for t in TEXTS]), X)
    np.testing.assert_array_equal(q.encode(TEXTS[::-1] + TEXTS[:2])[: len(TEXTS)], X[::-1])
    seen: list[int] = []
    q.encode(TEXTS * 5, on_progress=seen.append)
    assert seen[-1] == 5 * len(TEXTS) and np.all(np.diff(seen) > 0), seen


def test_cache_reused_without_export(cache, monkeypatch):
    import privembed.data.onnx_backend as em

    def boom(*a, **k):
        raise AssertionError("exported again")

    monkeypatch.setattr(em, "_export_fp32", boom)
    monkeypatch.setattr(em, "_quantize", boom)
    assert Embedder(backend="onnx-int8", cache_dir=cache).encode("x").shape == (384,)
    # the environment variable selects the cache when no cache_dir is given
    monkeypatch.setenv("PRIVEMBED_CACHE", str(cache))
    assert onnx_cache_dir() == cache / "onnx"
    assert Embedder(backend="onnx").encode("x").shape == (384,)


def test_cache_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIVEMBED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert onnx_cache_dir() == tmp_path / "xdg" / "privembed" / "onnx"
    monkeypatch.setenv("PRIVEMBED_CACHE", str(tmp_path / "pe"))
    assert onnx_cache_dir() == tmp_path / "pe" / "onnx"
    assert onnx_cache_dir(tmp_path / "x") == tmp_path / "x" / "onnx"


def test_corrupt_cache_is_rebuilt(cache, tmp_path, caplog, capfd, monkeypatch, onnx_embedder):
    import privembed.data.onnx_backend as em

    copy = tmp_path / "copy"
    shutil.copytree(cache, copy)
    (entry,) = (copy / "onnx").iterdir()
    # a damaged int8 graph is rebuilt alone
    with open(entry / "model-int8.onnx", "r+b") as f:
        f.seek(1000)
        f.write(b"\0" * 64)
    root_handlers = list(logging.getLogger().handlers)
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="privembed.data.embedders"):
        Embedder(backend="onnx-int8", cache_dir=copy).encode("x")
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]
    # onnxruntime's quantiser neither prints nor leaves a handler on the root logger
    assert "quantization" not in capfd.readouterr().err
    assert logging.getLogger().handlers == root_handlers
    assert "corrupt (model-int8.onnx); rebuilding" in caplog.records[0].getMessage()
    # a truncated fp32 graph: the whole entry is discarded and built again (by a stand-in for
    # the export, which copies the good files: the session fixture already ran a real export)
    caplog.clear()
    with open(entry / "model.onnx", "r+b") as f:
        f.truncate(1000)
    (good,) = (cache / "onnx").iterdir()
    built = []

    def export(name, folder, dest):
        built.append(name)
        for n in ("model.onnx", "tokenizer.json", "manifest.json"):
            shutil.copy(good / n, dest / n)

    monkeypatch.setattr(em, "_export_fp32", export)
    with caplog.at_level(logging.WARNING, logger="privembed.data.embedders"):
        X = Embedder(backend="onnx", cache_dir=copy).encode(TEXTS[:3])
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "model.onnx does not match its SHA-256" in msg and "\n" not in msg
    np.testing.assert_allclose(X, onnx_embedder.encode(TEXTS[:3]), atol=1e-5)
    assert built == ["all-MiniLM-L6-v2"]
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["verified_min_cosine"] >= 0.99999
    assert not [p.name for p in (copy / "onnx").iterdir() if p.name.startswith(".")]


def test_bad_arguments(cache):
    with pytest.raises(ValueError, match="backend must be one of"):
        Embedder(backend="tensorrt")
    with pytest.raises(ValueError, match="quantize=True needs an ONNX backend"):
        Embedder(backend="torch", quantize=True)
    with pytest.raises(ValueError, match="run on the CPU"):
        Embedder(backend="onnx", device="cuda", cache_dir=cache)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        Embedder(backend="onnx", threads=0, cache_dir=cache)
    with pytest.raises(ValueError, match="local model folders only"):
        Embedder("someone/some-hub-model", backend="onnx", cache_dir=cache)


def test_unsupported_pipeline_refused(tmp_path, cache):
    from privembed.data.embedders import _onnx_usable, resolve_model

    folder = tmp_path / "m"
    shutil.copytree(resolve_model(None)[1], folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "max"}))
    with pytest.raises(ValueError, match="supports mean and CLS pooling"):
        Embedder(str(folder), backend="onnx", cache_dir=cache)
    # "auto" does not pick onnx for it (it would use torch)
    assert not _onnx_usable("cpu", True, str(folder))
    assert _onnx_usable("cpu", True, resolve_model(None)[1])


def test_backend_from_the_environment(monkeypatch):
    """PRIVEMBED_EMBED_BACKEND picks the runtime of every embedder made without one; a bad
    value is refused naming the variable; an explicit backend wins."""
    from privembed.data.embedders import Embedder

    monkeypatch.setenv("PRIVEMBED_EMBED_BACKEND", "torch")
    assert Embedder().backend == "torch"
    monkeypatch.setenv("PRIVEMBED_EMBED_BACKEND", "tpu")
    with pytest.raises(ValueError, match="PRIVEMBED_EMBED_BACKEND must be one of"):
        Embedder()
    assert Embedder(backend="torch").backend == "torch"
