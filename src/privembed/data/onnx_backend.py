"""The ONNX backend's graphs: a local sentence-transformers folder exported to ONNX
(``torch.onnx``, then ONNX Runtime's BERT operator fusion where the architecture is BERT),
checked against the torch model on probe texts, optionally quantised to int8, cached per model
digest and export version (:func:`onnx_cache_dir`), and run in shared onnxruntime sessions.

Imported through :mod:`privembed.data.embedders`, whose ONNX runner tokenises, batches and
pools around these sessions.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from .models import _available_cores, _load_uncached, model_digest, resolve_model

__all__ = ["export_onnx", "onnx_cache_dir"]

# Bump when the export (graph, fusion, quantisation settings, files) changes: old caches re-export.
_EXPORT_VERSION = "1"
_QUANTIZATION = "int8-dynamic-per-channel"
# padded tokens per ONNX call: 384-768 ran fastest on 2 cores (fp32 GCIDE definitions; 128:
# -15 %, 4096: -17 %), on a quiet and on a loaded machine alike
_TOKENS_PER_CALL = 512
_log = logging.getLogger("privembed.data.embedders")

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class _Pipeline:
    """What a sentence-transformers folder does after its transformer."""

    pooling: str  # "mean" or "cls"
    normalizes: bool


def _read_pipeline(folder: Path) -> _Pipeline:
    """The pooling and normalisation of a local sentence-transformers folder.

    Raises ValueError for pipelines the ONNX path does not reproduce.
    """
    spec = folder / "modules.json"
    if not spec.is_file():
        raise ValueError(
            f"the ONNX backend needs a sentence-transformers folder with modules.json; "
            f"{str(folder)!r} has none (use backend='torch')."
        )
    mods = json.loads(spec.read_text(encoding="utf-8"))
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in mods]
    ok = (
        kinds[:2] == ["Transformer", "Pooling"]
        and kinds[2:] in ([], ["Normalize"])
        and str(mods[0].get("path", "")) in ("", ".")
    )
    if not ok:
        raise ValueError(
            "the ONNX backend reproduces Transformer -> Pooling [-> Normalize] pipelines; "
            f"{folder.name!r} has {' -> '.join(kinds)} (use backend='torch')."
        )
    cfg = json.loads((folder / str(mods[1]["path"]) / "config.json").read_text(encoding="utf-8"))
    mode = cfg.get("pooling_mode")
    if mode is None:  # sentence-transformers < 6: one boolean per mode
        on = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
        mode = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}.get(
            on[0] if len(on) == 1 else "", "+".join(on) or "none"
        )
    if mode not in ("mean", "cls"):
        raise ValueError(
            f"the ONNX backend supports mean and CLS pooling; {folder.name!r} uses "
            f"pooling_mode={mode!r} (use backend='torch')."
        )
    return _Pipeline(pooling=str(mode), normalizes=len(kinds) == 3)


# --------------------------------------------------------------------------- the ONNX cache


def onnx_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where exported ONNX models are cached.

    ``cache_dir`` if given, else ``$PRIVEMBED_CACHE``, else ``$XDG_CACHE_HOME/privembed``, else
    ``~/.cache/privembed``; exports live in its ``onnx/`` sub-folder, one folder per model digest
    and export version.

    Examples
    --------
    >>> onnx_cache_dir("/tmp/pe-cache").as_posix()
    '/tmp/pe-cache/onnx'
    """
    from ..core.cache import cache_root

    root = Path(cache_dir) if cache_dir is not None else cache_root()
    return root.expanduser() / "onnx"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


class _CorruptCache(Exception):
    """A cache entry that fails its integrity check (the message says why)."""


@dataclass(frozen=True)
class _Entry:
    """One verified cache folder: the fp32 graph, the tokenizer and what they reproduce."""

    path: Path
    manifest: dict[str, Any]

    @property
    def fp32(self) -> Path:
        return self.path / "model.onnx"

    @property
    def int8(self) -> Path:
        return self.path / "model-int8.onnx"

    @staticmethod
    def load(path: Path, digest: str) -> _Entry:
        """The entry in ``path``, checked: export version, files, and that it was exported
        from the model folder whose :func:`model_digest` is ``digest``."""
        try:
            manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
            files = manifest["files"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _CorruptCache(f"unreadable manifest.json ({type(exc).__name__})") from None
        if manifest.get("export_version") != _EXPORT_VERSION:
            raise _CorruptCache(f"export version {manifest.get('export_version')!r}")
        if manifest.get("model_digest") != digest:
            raise _CorruptCache("exported from another model folder (model_digest differs)")
        for name, sha in files.items():
            p = path / name
            if not p.is_file():
                raise _CorruptCache(f"{name} is missing")
            if _sha256_file(p) != sha:
                raise _CorruptCache(f"{name} does not match its SHA-256")
        return _Entry(path, manifest)

    def int8_ok(self) -> bool:
        side = self.path / "model-int8.json"
        try:
            digest = json.loads(side.read_text(encoding="utf-8"))["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return self.int8.is_file() and _sha256_file(self.int8) == digest


def _entry_dir(cache: Path, name: str, digest: str) -> Path:
    """The cache folder of the export of the model folder whose :func:`model_digest` is
    ``digest`` (folders that differ behind a symbolic link have different ones)."""
    key = hashlib.sha256(f"{_EXPORT_VERSION}\n{digest}".encode()).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
    return cache / f"{safe}-{key[:16]}"


def _discard(path: Path) -> None:
    """Move a folder aside (atomic) and delete it."""
    aside = path.with_name(f".{path.name}.discard.{os.getpid()}.{os.urandom(4).hex()}")
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, aside)
        shutil.rmtree(aside, ignore_errors=True)


def _get_entry(name: str, folder: Path, cache: Path) -> _Entry:
    """The verified cache entry for ``folder``, exporting (atomically) if absent or corrupt.

    An entry is used only for the folder it was exported from: its manifest's ``model_digest``
    must be the folder's, else it is rebuilt.
    """
    digest = model_digest(folder)
    final = _entry_dir(cache, name, digest)
    if final.exists():
        try:
            return _Entry.load(final, digest)
        except _CorruptCache as why:
            _log.warning("ONNX cache %s is corrupt (%s); rebuilding it.", final, why)
            _discard(final)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache))
    try:
        _export_fp32(name, folder, tmp)
        # mkdtemp makes the folder private; the cache holds public model files only, and a
        # cache warmed by one user (a container build) must be readable by another
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
            # another process installed the same export first: use theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        return _Entry.load(final, digest)
    except _CorruptCache as why:  # the folder changed during the export, or a racing writer
        raise RuntimeError(
            f"the ONNX export of {name!r} in {final} fails its check: {why}."
        ) from None


def _ensure_int8(entry: _Entry) -> Path:
    if entry.int8_ok():
        return entry.int8
    if entry.int8.exists() or (entry.path / "model-int8.json").exists():
        _log.warning("ONNX cache %s is corrupt (model-int8.onnx); rebuilding it.", entry.int8)
    fd, tmp = tempfile.mkstemp(prefix=".model-int8.", suffix=".onnx", dir=entry.path)
    os.close(fd)
    try:
        _quantize(entry.fp32, Path(tmp))
        digest = _sha256_file(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, entry.int8)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _write_json_atomic(
        entry.path / "model-int8.json",
        {"sha256": digest, "quantization": _QUANTIZATION, "onnxruntime": _version("onnxruntime")},
    )
    return entry.int8


def export_onnx(
    model: str | None = None, *, quantize: bool = False, cache_dir: str | Path | None = None
) -> Path:
    """Export a local sentence-transformers model to ONNX (once) and return the cached graph.

    The export is what ``Embedder(model, backend="onnx")`` does on first use; call it ahead of
    time to warm a cache (a container image, a shared volume). Exporting needs ``torch``,
    ``sentence-transformers`` and ``onnx``; later runs need only ``onnxruntime``.

    Parameters
    ----------
    model : str, optional
        As for :class:`Embedder` (a local folder; default: the offline all-MiniLM-L6-v2).
    quantize : bool, default False
        Also build (and return) the int8 dynamically quantised graph.
    cache_dir : path, optional
        See :func:`onnx_cache_dir`.

    Returns
    -------
    Path
        The ``model.onnx`` (or ``model-int8.onnx``) file in the cache.
    """
    name, target, local = resolve_model(model)
    if not local:
        raise ValueError(
            f"the ONNX backend exports local model folders only, got model={model!r} (a hub "
            "name); download it to a folder first or use backend='torch'."
        )
    _read_pipeline(Path(target))
    entry = _get_entry(name, Path(target), onnx_cache_dir(cache_dir))
    return _ensure_int8(entry) if quantize else entry.fp32


# --------------------------------------------------------------------------- export


_PROBES = (
    "a",
    "The patient has type 2 diabetes mellitus and takes metformin twice a day.",
    "Stock markets FELL sharply on Monday; the Nasdaq lost 3.2%.",
    "Ça coûte 15 € — naïve café déjà vu, Straße, 東京 and emoji 🙂.",
    "  leading and trailing spaces  ",
    "To dishonor. Shall flight abuse your name? --Shak.",
    # longer than max_seq_length tokens: exercises truncation and late positions
    " ".join(["Liberty may be endangered by the abuses of liberty as well as of power."] * 40),
)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence exporter warnings and onnxruntime's tool logging (one-off, export time only)."""

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "onnxruntime" not in record.pathname and not record.name.startswith("onnx")

    drop = _Drop()
    root = logging.getLogger()
    handlers = list(root.handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    # onnxruntime's tools call logging.warning(), which would install a stderr handler on the
    # root logger (logging.basicConfig) when it has none: a no-op handler prevents that
    guard = logging.NullHandler()
    root.addHandler(guard)
    root.addFilter(drop)
    for h in handlers:
        h.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for h in handlers:
            h.removeFilter(drop)
        root.removeFilter(drop)
        root.removeHandler(guard)


def _export_fp32(name: str, folder: Path, dest: Path) -> None:
    """Trace the transformer + pooling to ONNX, fuse, verify against torch, write into ``dest``."""
    require("torch", "embed", purpose="exporting the ONNX embedding model")
    require("onnx", "embed", purpose="exporting the ONNX embedding model")
    from tokenizers import Tokenizer

    pipeline = _read_pipeline(folder)
    st_model = _load_uncached(str(folder), True, "cpu")
    hf_tok = st_model.tokenizer
    max_len = int(st_model.max_seq_length)
    lower = bool(getattr(st_model[0], "do_lower_case", False))
    tok = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_len)
    pad_id = int(hf_tok.pad_token_id or 0)
    (dest / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")

    # the same token ids as the model's own tokenizer, or nothing is cached
    probes = [t.lower() for t in _PROBES] if lower else list(_PROBES)
    ref_ids = hf_tok(probes, truncation=True, max_length=max_len)["input_ids"]
    if [list(r) for r in ref_ids] != [e.ids for e in tok.encode_batch(probes)]:
        raise RuntimeError(f"the saved tokenizer of {name!r} does not reproduce the model's.")

    raw, config = dest / "raw.onnx", _trace(st_model, pipeline.pooling, dest / "raw.onnx")
    candidates = [raw]
    if getattr(config, "model_type", "") == "bert":
        try:
            _fuse_bert(raw, dest / "fused.onnx", config)
            candidates.insert(0, dest / "fused.onnx")
        except Exception as exc:  # fusion is an optimisation: the plain graph still serves
            _log.info("onnxruntime BERT fusion failed (%s); using the plain graph.", exc)

    # the reference: the torch model itself (pooled output, before any normalisation we add)
    ref = np.asarray(
        st_model.encode(
            list(_PROBES),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        ),
        dtype=np.float64,
    )
    chosen: tuple[Path, float] | None = None
    for graph in candidates:
        X = _run_sorted(
            _new_session(str(graph), _available_cores()),
            tok,
            probes,
            pad_id=pad_id,
            batch_size=3,  # padded and unpadded batches
            dim=ref.shape[1],
        ).astype(np.float64)
        if pipeline.normalizes:
            X /= np.linalg.norm(X, axis=1, keepdims=True)
        nx, nr = np.linalg.norm(X, axis=1), np.linalg.norm(ref, axis=1)
        cos = float(np.min(np.sum(X * ref, axis=1) / (nx * nr)))
        scale = float(np.max(np.abs(nx / nr - 1)))
        if cos >= 1 - 1e-5 and scale <= 1e-4:
            chosen = (graph, cos)
            break
        _log.info("ONNX graph %s: cosine %.7f, norm error %.2g.", graph.name, cos, scale)
    if chosen is None:
        raise RuntimeError(
            f"the ONNX export of {name!r} does not reproduce the torch model (cosine < 0.99999)."
        )
    os.replace(chosen[0], dest / "model.onnx")
    for p in candidates:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    manifest = {
        "export_version": _EXPORT_VERSION,
        "model": name,
        "model_digest": model_digest(folder),
        "dim": int(ref.shape[1]),
        "max_seq_length": max_len,
        "lowercase": lower,
        "pad_id": pad_id,
        "pooling": pipeline.pooling,
        "normalizes": pipeline.normalizes,
        "fused": chosen[0].name == "fused.onnx",
        "verified_min_cosine": chosen[1],
        "versions": {
            d: _version(d)
            for d in ("privembed", "torch", "transformers", "onnx", "onnxruntime", "tokenizers")
        },
        "files": {n: _sha256_file(dest / n) for n in ("model.onnx", "tokenizer.json")},
    }
    _write_json_atomic(dest / "manifest.json", manifest)


def _trace(st_model: Any, pooling: str, path: Path) -> Any:
    """Export the transformer and its pooling as one graph: (ids, mask) -> pooled vectors.

    Returns the transformer's configuration.
    """
    import torch

    hf = copy.deepcopy(st_model[0].auto_model).eval().float()
    if hasattr(hf, "set_attn_implementation"):
        # plain attention traces to the pattern onnxruntime fuses into its Attention operator
        with contextlib.suppress(Exception):
            hf.set_attn_implementation("eager")
    module: Any = torch.nn.Module

    class Pooled(module):
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            h = self.hf(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if pooling == "cls":
                return h[:, 0]
            w = attention_mask.unsqueeze(-1).to(h.dtype)
            return (h * w).sum(1) / w.sum(1).clamp(min=1e-9)

    sample = st_model.tokenizer(["a b c", "a"], padding=True, return_tensors="pt")
    with _quiet(), torch.no_grad():
        torch.onnx.export(
            Pooled().eval(),
            (sample["input_ids"], sample["attention_mask"]),
            str(path),
            dynamo=False,  # the TorchScript exporter: no onnxscript needed
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "embedding": {0: "batch"},
            },
            opset_version=17,
            do_constant_folding=True,
        )
    return hf.config


def _fuse_bert(src: Path, dst: Path, config: Any) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet():
        opt = optimize_model(
            str(src),
            model_type="bert",
            num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size),
            opt_level=0,
        )
        opt.save_model_to_file(str(dst))


def _quantize(src: Path, dst: Path) -> None:
    onnx = require("onnx", "embed", purpose="int8 quantisation of the ONNX model")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True},
        )


# --------------------------------------------------------------------------- running


def _new_session(path: str, threads: int) -> Any:
    ort = require("onnxruntime", "embed", purpose="the ONNX embedding backend")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    # no busy-waiting between operators: on a shared machine (other processes, the proxy's
    # event loop) spinning threads took cores from the work (measured 1.3-2x slower under load)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=4)
def _session(path: str, digest: str, threads: int) -> Any:
    """A shared onnxruntime session (``digest`` keys it on the file's content)."""
    return _new_session(path, threads)


def _run_sorted(
    session: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    pad_id: int,
    batch_size: int,
    dim: int,
    on_rows: ProgressCallback | None = None,
) -> NDArray[np.float32]:
    """Tokenise, sort by length (longest first), run in padded batches, restore the order.

    A batch holds at most ``batch_size`` texts and about :data:`_TOKENS_PER_CALL` tokens
    (padding included): long texts go in small batches, short ones in large ones.
    """
    out = np.empty((len(texts), dim), dtype=np.float32)
    encs = [e.ids for e in tokenizer.encode_batch(texts)]
    lens = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
    order = np.argsort(-lens, kind="stable")
    s = 0
    while s < len(texts):
        width = int(lens[order[s]])
        rows = order[s : s + max(1, min(batch_size, _TOKENS_PER_CALL // width))]
        s += len(rows)
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, i in enumerate(rows):
            n = len(encs[i])
            ids[r, :n] = encs[i]
            mask[r, :n] = 1
        out[rows] = session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        if on_rows is not None:
            on_rows(len(rows))
    return out


def _run_each(
    session: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    dim: int,
    workers: int,
    on_rows: ProgressCallback | None = None,
) -> NDArray[np.float32]:
    """One text per call (no padding), calls spread over ``workers`` threads, order kept.

    A text's vector is then a function of the text alone, whatever else is being embedded.
    """
    encs = [e.ids for e in tokenizer.encode_batch(texts)]
    out = np.empty((len(texts), dim), dtype=np.float32)

    def work(lo: int) -> int:
        hi = min(lo + 16, len(texts))
        for i in range(lo, hi):
            ids = np.asarray([encs[i]], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            out[i] = session.run(["embedding"], feed)[0][0]
        return hi - lo

    with ThreadPoolExecutor(workers, thread_name_prefix="privembed-onnx") as pool:
        for done in pool.map(work, range(0, len(texts), 16)):
            if on_rows is not None:
                on_rows(done)  # on the caller's thread
    return out
