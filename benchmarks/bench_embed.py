"""Embedding throughput and fidelity: torch vs ONNX Runtime (fp32, int8), one run, one machine.

Run::

    apt-get download dict-gcide && dpkg-deb -x dict-gcide_*.deb /tmp/gcide
    python benchmarks/bench_embed.py --gcide /tmp/gcide/usr/share/dictd \
        [--n 10000] [--queries 1000] [--rounds 2] [--cache-dir /tmp/pe-cache]

Texts: ``--n`` GCIDE definition units (real dictionary text, ``"<headword>: <definition>"``,
:func:`privembed.evaluation.loaders.gcide_retrieval`): those relevant to ``--queries`` test
queries plus a deterministic sample of the rest. Each round embeds all texts with every backend
in turn (so load from other processes hits all backends alike); texts/s is the median over
rounds and the speed-up is the median of the per-round ratios. Backends:

- ``torch (st.encode)``: ``SentenceTransformer.encode(texts, batch_size=64)``, what
  ``Embedder`` did before the ONNX backend (the baseline);
- ``torch (Embedder)``: ``Embedder(backend="torch")`` (per-batch calls, progress by rows);
- ``onnx``, ``onnx-int8``: ``Embedder(backend=...)`` on all cores.

Fidelity: cosine of each backend's vectors to the baseline's; top-10 nearest-neighbour overlap
on the same texts (cosine, self excluded); GCIDE retrieval (usage quote with the headword
masked -> the definition it stands under) recall@10 and MRR@10 over the timed texts; and
Spearman/Pearson correlation with the human judgments of the Lee corpus (50 documents, 1,225
pairs; gensim's test data).

Floor: the transformer's multiply-add count for the tokens actually run (with padding) and
without padding, against this machine's measured float32 GEMM rate (numpy, all cores), gives the
best texts/s that dense float32 arithmetic allows.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from scipy import stats

from privembed.embedders import Embedder, resolve_model
from privembed.evaluation.loaders import MTEBRetrieval, gcide_retrieval, lee_corpus


def gcide_sample(path: Path | None, n_docs: int, n_queries: int) -> MTEBRetrieval:
    """GCIDE retrieval (test split): ``n_queries`` queries, ``n_docs`` documents.

    The documents are every one relevant to a kept query plus the documents of smallest
    ``sha256(doc id)`` (a deterministic sample of distractors that does not look at the
    queries' results), in corpus order.
    """
    task = gcide_retrieval(path, split="test", max_queries=n_queries)
    need = {d for r in task.qrels.values() for d in r}
    rest = sorted(
        (hashlib.sha256(d.encode()).hexdigest(), i)
        for i, d in enumerate(task.doc_ids)
        if d not in need
    )
    keep = {i for i, d in enumerate(task.doc_ids) if d in need}
    keep |= {i for _, i in rest[: max(0, n_docs - len(keep))]}
    idx = sorted(keep)
    return MTEBRetrieval(
        name=f"{task.name}-{len(idx)}",
        doc_ids=[task.doc_ids[i] for i in idx],
        doc_texts=[task.doc_texts[i] for i in idx],
        query_ids=task.query_ids,
        query_texts=task.query_texts,
        qrels=task.qrels,
    )


def retrieval_scores(task: MTEBRetrieval, D: np.ndarray, Q: np.ndarray, k: int = 10) -> tuple:
    """Recall@k and MRR@k of exact cosine search (unit rows)."""
    pos = {d: i for i, d in enumerate(task.doc_ids)}
    S = Q @ D.T
    top = np.argsort(-S, axis=1)[:, :k]
    rec, rr = [], []
    for qi, q in enumerate(task.query_ids):
        rel = {pos[d] for d, g in task.qrels[q].items() if g > 0 and d in pos}
        hits = [r for r, j in enumerate(top[qi]) if j in rel]
        rec.append(len({top[qi][r] for r in hits}) / len(rel))
        rr.append(1 / (hits[0] + 1) if hits else 0.0)
    return float(np.mean(rec)), float(np.mean(rr))


def gemm_flops(threads: int) -> float:
    """Measured float32 GEMM rate (FLOP/s) of numpy's BLAS on shapes like the model's."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4096, 384), dtype=np.float32)
    B = rng.standard_normal((384, 1536), dtype=np.float32)
    A @ B
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(10):
            A @ B
        best = max(best, 10 * 2 * 4096 * 384 * 1536 / (time.perf_counter() - t))
    return best


def model_flops(lengths: np.ndarray, batch_size: int, *, padded: bool) -> float:
    """FLOPs of the 6-layer, 384-wide MiniLM encoder over texts of these token lengths.

    Per layer and sequence of n tokens: 2n(4h^2 + 2hi) for the projections and the
    feed-forward block, 4n^2 h for attention scores and their weighted sum (h=384, i=1536).
    ``padded``: every text costs its batch's longest length (batches of length-sorted texts).
    """
    h, i, layers = 384, 1536, 6
    n = np.sort(lengths)[::-1].astype(np.float64)
    if padded:
        n = np.concatenate(
            [np.full(len(n[s : s + batch_size]), n[s]) for s in range(0, len(n), batch_size)]
        )
    per_layer = 2 * n * (4 * h * h + 2 * h * i) + 4 * n * n * h
    return float(layers * per_layer.sum())


def top_k_overlap(X: np.ndarray, Y: np.ndarray, k: int = 10) -> float:
    """Mean share of each row's k nearest neighbours (cosine, self excluded) kept in Y."""
    out = []
    for s in range(0, len(X), 2048):
        a = X[s : s + 2048] @ X.T
        b = Y[s : s + 2048] @ Y.T
        r = np.arange(s, s + len(a))
        a[r - s, r] = -np.inf
        b[r - s, r] = -np.inf
        na = np.argpartition(-a, k, axis=1)[:, :k]
        nb = np.argpartition(-b, k, axis=1)[:, :k]
        out += [len(set(p) & set(q)) / k for p, q in zip(na, nb, strict=True)]
    return float(np.mean(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--gcide", type=Path, default=None, help="folder with gcide.index and gcide.dict.dz"
    )
    ap.add_argument("--n", type=int, default=10_000, help="documents (the timed texts)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--skip-torch-embedder", action="store_true")
    args = ap.parse_args()

    task = gcide_sample(args.gcide, args.n, args.queries)
    texts = task.doc_texts
    t = time.perf_counter()
    embedders = {
        "onnx": Embedder(backend="onnx", batch_size=args.batch_size, cache_dir=args.cache_dir),
        "onnx-int8": Embedder(
            backend="onnx-int8", batch_size=args.batch_size, cache_dir=args.cache_dir
        ),
    }
    setup = time.perf_counter() - t
    torch_emb = Embedder(backend="torch", batch_size=args.batch_size)
    import torch
    from sentence_transformers import SentenceTransformer

    # the SentenceTransformer itself: the code path Embedder had before the ONNX backend
    st = SentenceTransformer(resolve_model(None)[1], device="cpu")

    def baseline(items: list[str]) -> np.ndarray:
        return st.encode(
            items,
            batch_size=args.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        ).astype(np.float32)

    runs = {"torch (st.encode)": baseline}
    if not args.skip_torch_embedder:
        runs["torch (Embedder)"] = torch_emb.encode
    runs.update({k: e.encode for k, e in embedders.items()})
    for fn in runs.values():  # warm-up
        fn(texts[:64])

    rates: dict[str, list[float]] = {k: [] for k in runs}
    out: dict[str, np.ndarray] = {}
    loads = []
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t = time.perf_counter()
            out[name] = fn(texts)
            rates[name].append(len(texts) / (time.perf_counter() - t))
            loads.append(os.getloadavg()[0])

    base = "torch (st.encode)"
    ref = out[base]
    lee = lee_corpus()
    lee_vecs = {name: fn(lee.documents) for name, fn in runs.items()}
    scores = {
        name: retrieval_scores(task, out[name], fn(task.query_texts)) for name, fn in runs.items()
    }
    lengths = np.array(embedders["onnx"].count_tokens(texts))
    gemm = gemm_flops(torch.get_num_threads())
    f_pad = model_flops(lengths, args.batch_size, padded=True)
    f_min = model_flops(lengths, args.batch_size, padded=False)

    print(f"## Embedding backends: all-MiniLM-L6-v2 on {len(texts):,} GCIDE definitions\n")
    print(
        f"retrieval: {len(task.query_ids)} GCIDE test queries (usage quotes, headword masked) "
        f"against these {len(texts):,} definitions, exact cosine search\n"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}, torch {version('torch')} "
        f"({torch.get_num_threads()} threads), onnxruntime {version('onnxruntime')} "
        f"({embedders['onnx'].threads} threads), sentence-transformers "
        f"{version('sentence-transformers')}; batch size {args.batch_size}; "
        f"{args.rounds} rounds; 1-min load average during the rounds "
        f"{min(loads):.1f}-{max(loads):.1f}; ONNX export + int8 quantisation on first use "
        f"(or cache load): {setup:.1f} s.\n"
    )
    print(
        f"tokens per text (with [CLS]/[SEP], truncated at 256): mean {lengths.mean():.1f}, "
        f"median {np.median(lengths):.0f}, max {lengths.max()}\n"
    )
    print(
        "| backend | texts/s (median) | per round | x baseline | cosine to baseline: min / mean "
        "| top-10 NN overlap | Lee STS Spearman / Pearson | GCIDE recall@10 / MRR@10 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in runs:
        r = np.median(rates[name])
        ratio = np.median(np.array(rates[name]) / np.array(rates[base]))
        cos = np.sum(out[name] * ref, axis=1)
        V = lee_vecs[name] / np.linalg.norm(lee_vecs[name], axis=1, keepdims=True)
        sims = np.sum(V[lee.pairs[:, 0]] * V[lee.pairs[:, 1]], axis=1)
        sp = stats.spearmanr(sims, lee.scores).statistic
        pe = stats.pearsonr(sims, lee.scores).statistic
        nn = top_k_overlap(ref, out[name]) if name != base else 1.0
        print(
            f"| {name} | {r:.0f} | {', '.join(f'{x:.0f}' for x in rates[name])} | {ratio:.2f} "
            f"| {cos.min():.6f} / {cos.mean():.6f} | {nn:.3f} | {sp:.4f} / {pe:.4f} "
            f"| {scores[name][0]:.4f} / {scores[name][1]:.4f} |"
        )
    print(
        f"\nfloor: {f_pad / len(texts) / 1e6:.0f} MFLOP per text as run (length-sorted batches "
        f"of {args.batch_size}), {f_min / len(texts) / 1e6:.0f} MFLOP without padding; measured "
        f"float32 GEMM {gemm / 1e9:.0f} GFLOP/s -> at most {gemm / f_min * len(texts):.0f} "
        f"texts/s in float32."
    )
    for name in runs:
        achieved = np.median(rates[name]) * f_pad / len(texts)
        print(f"- {name}: {achieved / 1e9:.1f} GFLOP/s effective, {achieved / gemm:.0%} of GEMM")
    print(f"\nmodel: {resolve_model(None)[1]}")


if __name__ == "__main__":
    main()
