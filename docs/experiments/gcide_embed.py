"""Embed the GCIDE retrieval task once and cache it under /tmp (not in the repository).

The corpus (every definition unit, the same for all splits) and the queries of the requested
splits are embedded with all-MiniLM-L6-v2 (:class:`privembed.embedders.Embedder`, L2-normalised
float32) in chunks of 5,000 texts, so an interrupted run resumes where it stopped. The cache
folder is keyed by a digest of the texts, so a change to the loader never reuses stale vectors.

Run: ``nice -n 10 python docs/experiments/gcide_embed.py [--cache /tmp/privembed_gcide]``
Uses the ONNX backend of the embedder when it has one (``Embedder(backend="onnx")``).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import time
from pathlib import Path

import numpy as np

from privembed.embedders import Embedder
from privembed.evaluation.loaders import MTEBRetrieval, gcide_retrieval

CHUNK = 5000
DEFAULT_CACHE = Path("/tmp/privembed_gcide")


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def make_embedder() -> Embedder:
    if "backend" in inspect.signature(Embedder).parameters:
        try:
            return Embedder(backend="onnx")  # type: ignore[call-arg]
        except Exception as exc:  # fall back to torch
            print(f"onnx backend unavailable ({exc}); using torch")
    return Embedder()


def embed_cached(texts: list[str], cache: Path, label: str, embedder=None) -> np.ndarray:
    """Embeddings of ``texts`` (float32, unit rows), computed once per text digest."""
    folder = cache / f"{label}-{_digest(texts)}"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / "all.npy"
    if final.exists():
        return np.load(final)
    parts = []
    for c, start in enumerate(range(0, len(texts), CHUNK)):
        f = folder / f"chunk_{c:04d}.npy"
        if not f.exists():
            if embedder is None:
                embedder = make_embedder()
            t0 = time.time()
            X = embedder.encode(texts[start : start + CHUNK])
            np.save(f.with_suffix(".tmp.npy"), X)
            f.with_suffix(".tmp.npy").rename(f)
            print(f"{label}: {start + len(X)}/{len(texts)} ({time.time() - t0:.0f} s)", flush=True)
        parts.append(np.load(f))
    X = np.concatenate(parts)
    np.save(final, X)
    (folder / "meta.json").write_text(json.dumps({"n": len(texts), "label": label}))
    return X


def load_embedded(
    split: str, cache: Path = DEFAULT_CACHE, path: str | None = None, max_queries: int | None = None
) -> tuple[MTEBRetrieval, np.ndarray, np.ndarray]:
    """The task of ``split`` with its corpus and query embeddings (from the cache)."""
    task = gcide_retrieval(path, split=split, max_queries=max_queries)
    D = embed_cached(task.doc_texts, cache, "corpus")
    Q = embed_cached(task.query_texts, cache, f"queries-{split}")
    return task, D, Q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument(
        "--path", default=None, help="GCIDE folder (default: PRIVEMBED_GCIDE or /usr/share/dictd)"
    )
    ap.add_argument("--splits", nargs="+", default=["dev", "test"])
    args = ap.parse_args()
    for split in args.splits:  # queries first (small), then the corpus
        task = gcide_retrieval(args.path, split=split)
        embed_cached(task.query_texts, args.cache, f"queries-{split}")
    embed_cached(task.doc_texts, args.cache, "corpus")


if __name__ == "__main__":
    main()
