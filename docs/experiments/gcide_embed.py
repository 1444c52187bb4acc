"""Embed the GCIDE retrieval task once and cache it under /tmp (not in the repository).

The corpus (every definition unit, the same for all splits, or a documented subset: see
:func:`subset`) and deterministic samples of the dev and test queries are embedded with all-MiniLM-L6-v2 (:class:`privembed.data.embedders.Embedder`, L2-normalised
float32) in chunks of 5,000 texts, so an interrupted run resumes where it stopped. The cache
folder is keyed by a digest of the texts, so a change to the loader never reuses stale vectors.

Run: ``nice -n 10 python docs/experiments/gcide_embed.py [--n-docs 40000] [--cache DIR]``
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

from privembed.data.embedders import Embedder
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


def subset(tasks: list[MTEBRetrieval], n_docs: int | None) -> MTEBRetrieval:
    """The tasks' shared corpus cut to ``n_docs`` documents (``None``: all), queries merged.

    The subset keeps every document judged relevant to one of the tasks' queries and fills up
    with the documents of smallest ``sha256("privembed-gcide-subset:" + doc id)``, in corpus
    order: a deterministic sample of distractors that does not depend on the queries' results.
    """
    base = tasks[0]
    qrels = {q: r for t in tasks for q, r in t.qrels.items()}
    keep = set(range(len(base.doc_ids)))
    if n_docs is not None and n_docs < len(base.doc_ids):
        index = {d: i for i, d in enumerate(base.doc_ids)}
        relevant = {index[d] for r in qrels.values() for d in r}
        rest = sorted(
            (i for i in range(len(base.doc_ids)) if i not in relevant),
            key=lambda i: hashlib.sha256(
                b"privembed-gcide-subset:" + base.doc_ids[i].encode()
            ).digest(),
        )
        keep = relevant | set(rest[: max(n_docs - len(relevant), 0)])
    order = sorted(keep)
    return MTEBRetrieval(
        name=f"{base.name}-{len(order)}",
        doc_ids=[base.doc_ids[i] for i in order],
        doc_texts=[base.doc_texts[i] for i in order],
        query_ids=[q for t in tasks for q in t.query_ids],
        query_texts=[q for t in tasks for q in t.query_texts],
        qrels=qrels,
    )


def load_embedded(
    *,
    n_docs: int | None = 40_000,
    test_queries: int = 2000,
    dev_queries: int = 1000,
    cache: Path = DEFAULT_CACHE,
    path: str | None = None,
) -> dict:
    """Dev and test queries (deterministic samples) over one corpus (subset), embedded.

    Returns a dict with ``doc_ids``, ``D`` (n_docs, 384) and per split ``"dev"``/``"test"`` the
    task (queries of that split only, same corpus) and its query matrix.
    """
    dev = gcide_retrieval(path, split="dev", max_queries=dev_queries)
    test = gcide_retrieval(path, split="test", max_queries=test_queries)
    corpus = subset([dev, test], n_docs)
    D = embed_cached(corpus.doc_texts, cache, "corpus")
    out: dict = {"doc_ids": corpus.doc_ids, "doc_texts": corpus.doc_texts, "D": D}
    for split, t in (("dev", dev), ("test", test)):
        Q = embed_cached(t.query_texts, cache, f"queries-{split}")
        out[split] = (t, Q)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument(
        "--path", default=None, help="GCIDE folder (default: PRIVEMBED_GCIDE or /usr/share/dictd)"
    )
    ap.add_argument("--n-docs", type=int, default=40_000, help="corpus subset size (0: all)")
    ap.add_argument("--test-queries", type=int, default=2000)
    ap.add_argument("--dev-queries", type=int, default=1000)
    args = ap.parse_args()
    data = load_embedded(
        n_docs=args.n_docs or None,
        test_queries=args.test_queries,
        dev_queries=args.dev_queries,
        cache=args.cache,
        path=args.path,
    )
    print(f"corpus {data['D'].shape}, dev {data['dev'][1].shape}, test {data['test'][1].shape}")


if __name__ == "__main__":
    main()
