"""Embedding speed against sentence-transformers' defaults and the GEMM floor, and int8's quality.

Run (GCIDE: ``apt-get download dict-gcide && dpkg-deb -x dict-gcide_*.deb /tmp/gcide``)::

    python benchmarks/bench_embed.py --gcide /tmp/gcide/usr/share/dictd          # short run
    python benchmarks/bench_embed.py --gcide ... --per-bucket 1200 --slices 6 \
        --docs 40000 --queries 7659                                             # full size

Without ``--gcide`` the ``PRIVEMBED_GCIDE`` variable or ``/usr/share/dictd`` is used.

**Speed** (``--part speed``). Texts: GCIDE definition units (real dictionary text) in three
token-length buckets -- short (6-12 tokens with [CLS]/[SEP]), median (20-24; the corpus' median
is 22) and long (128-256) -- ``--per-bucket`` each, a deterministic sample (smallest sha256 of
the document id). For 1 and 2 threads, interleaved in ``--slices`` slices (every backend
embeds slice 1, then slice 2, the order rotating, so load from other processes falls on all
alike):

- ``sentence-transformers defaults``: ``SentenceTransformer(model).encode(texts)`` as a user
  calls it (batch size 32, no length sorting beyond its own, torch's threads set to 1 or 2);
- ``onnx`` and ``onnx-int8``: ``Embedder(backend=..., threads=t)``.

The floor: the encoder's multiply-adds for the real tokens (no padding) over the best float32
GEMM rate measured on this machine at the same thread count (numpy's BLAS, torch, onnxruntime's
MLAS; (4096 x 384) @ (384 x 1536), measured between slices, best kept): the most texts/s dense
float32 arithmetic allows. int8 can pass it (VNNI does 4x the multiply-adds per instruction).

**Quality of int8** (``--part quality``). GCIDE retrieval (:func:`privembed.evaluation.loaders.
gcide_retrieval`, test split: a usage quote with its headword masked in the definitions ->
the definition it stands under): ``--queries`` queries against ``--docs`` documents (every
relevant one plus a deterministic sample), embedded with ``onnx`` (fp32, identical to torch to
1e-6) and ``onnx-int8``; NDCG@10, recall@10 and MRR@10 of exact cosine search, the paired
difference with a 95% bootstrap interval (2,000 resamples of the queries, fixed seed), the
cosine of each document's int8 vector to its fp32 one and the top-10 neighbour overlap, and
Lee-corpus STS correlations. **Gate**: int8 passes when the interval's lower end of the NDCG@10
difference is above -5% of fp32's NDCG@10 (it loses at most 5% of retrieval quality, at 95%
confidence), and the same for recall@10.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
from scipy import stats

from privembed.data.embedders import Embedder, resolve_model
from privembed.evaluation.loaders import MTEBRetrieval, gcide_retrieval, lee_corpus

BUCKETS = {"short": (6, 12), "median": (20, 24), "long": (128, 256)}
GATE = 0.05  # int8 may lose at most this share of fp32's NDCG@10 / recall@10 (95% interval)


def gcide_sample(task: MTEBRetrieval, n_docs: int) -> MTEBRetrieval:
    """The GCIDE retrieval task with ``n_docs`` documents.

    The documents are every one relevant to a kept query plus the documents of smallest
    ``sha256(doc id)`` (a deterministic sample of distractors that does not look at the
    queries' results), in corpus order.
    """
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


def gemm_meter(threads: int) -> Callable[[], dict[str, float]]:
    """A function that measures float32 GEMM rates (FLOP/s) on a model-like shape, per library.

    (4096 x 384) @ (384 x 1536), the feed-forward input projection for 4,096 tokens, with
    numpy's BLAS, torch, and onnxruntime's own MatMul (MLAS, what the ONNX backend runs). Each
    call times 3 x 5 products per library and keeps the best; the benchmark calls it between
    slices and keeps the best of all calls, the rate with the least interference.
    """
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    A = rng.standard_normal((4096, 384), dtype=np.float32)
    B = rng.standard_normal((384, 1536), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4096, 384])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4096, 1536])],
        [numpy_helper.from_array(B, "b")],
    )
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(
        onnx.helper.make_model(graph).SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    flop = 2 * 4096 * 384 * 1536
    tA, tB = torch.from_numpy(A), torch.from_numpy(B)
    libs: dict[str, Callable[[], object]] = {
        "numpy": lambda: A @ B,
        "torch": lambda: torch.matmul(tA, tB),
        "onnxruntime": lambda: sess.run(None, {"a": A}),
    }
    for mm in libs.values():
        mm()

    def measure() -> dict[str, float]:
        best: dict[str, float] = {}
        for lib, mm in libs.items():
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(5):
                    mm()
                best[lib] = max(best.get(lib, 0.0), 5 * flop / (time.perf_counter() - t))
        return best

    return measure


def model_flops(lengths: np.ndarray) -> float:
    """FLOPs of the 6-layer, 384-wide MiniLM encoder over texts of these token lengths.

    Per layer and sequence of n tokens: 2n(4h^2 + 2hi) for the projections and the
    feed-forward block, 4n^2 h for attention scores and their weighted sum (h=384, i=1536).
    No padding: the work any backend must do.
    """
    h, i, layers = 384, 1536, 6
    n = lengths.astype(np.float64)
    return float(layers * (2 * n * (4 * h * h + 2 * h * i) + 4 * n * n * h).sum())


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


def bucket_texts(task: MTEBRetrieval, per_bucket: int, counter: Embedder) -> dict[str, list[str]]:
    """GCIDE definition units of each token-length bucket (smallest sha256 of the id first)."""
    order = sorted(range(len(task.doc_ids)), key=lambda i: hashlib.sha256(
        task.doc_ids[i].encode()).hexdigest())  # fmt: skip
    out: dict[str, list[str]] = {b: [] for b in BUCKETS}
    for s in range(0, len(order), 20_000):
        chunk = [task.doc_texts[i] for i in order[s : s + 20_000]]
        for text, n in zip(chunk, counter.count_tokens(chunk), strict=True):
            for b, (lo, hi) in BUCKETS.items():
                if lo <= n <= hi and len(out[b]) < per_bucket:
                    out[b].append(text)
        if all(len(v) >= per_bucket for v in out.values()):
            break
    return out


def speed(args: argparse.Namespace, task: MTEBRetrieval) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(resolve_model(None)[1], device="cpu")
    counter = Embedder(backend="onnx", threads=1, cache_dir=args.cache_dir)
    buckets = bucket_texts(task, args.per_bucket, counter)
    print(
        "## Embedding speed: sentence-transformers defaults vs ONNX, by text length and threads\n"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
        f"{platform.python_version()}, torch {version('torch')}, onnxruntime "
        f"{version('onnxruntime')}, sentence-transformers {version('sentence-transformers')}; "
        f"{args.slices} interleaved slices per cell; model {resolve_model(None)[0]}\n"
    )
    print(
        "| texts | tokens mean | threads | ST defaults texts/s | onnx fp32 texts/s (x ST) "
        "| onnx int8 texts/s (x ST) | fp32 GEMM floor texts/s | fp32 / int8 share of floor "
        "| load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        runs: dict[str, Callable[[list[str]], object]] = {
            "st": lambda items: st.encode(items, show_progress_bar=False),
            "onnx": Embedder(backend="onnx", threads=threads, cache_dir=args.cache_dir).encode,
            "int8": Embedder(backend="onnx-int8", threads=threads, cache_dir=args.cache_dir).encode,
        }
        meter = gemm_meter(threads)
        for fn in runs.values():
            fn(buckets["median"][:64])  # warm-up
        for name, texts in buckets.items():
            lengths = np.array(counter.count_tokens(texts))
            secs = {k: 0.0 for k in runs}
            gemm, loads = 0.0, []
            bounds = np.linspace(0, len(texts), args.slices + 1).astype(int)
            names = list(runs)
            for j, (a, b) in enumerate(itertools.pairwise(bounds)):
                for k in names[j % len(names) :] + names[: j % len(names)]:
                    t = time.perf_counter()
                    runs[k](texts[a:b])
                    secs[k] += time.perf_counter() - t
                loads.append(os.getloadavg()[0])
                gemm = max(gemm, *meter().values())
            rate = {k: len(texts) / v for k, v in secs.items()}
            floor = gemm / model_flops(lengths) * len(texts)
            print(
                f"| {name} ({len(texts)}) | {lengths.mean():.1f} | {threads} | {rate['st']:.0f} "
                f"| {rate['onnx']:.0f} ({rate['onnx'] / rate['st']:.2f}) "
                f"| {rate['int8']:.0f} ({rate['int8'] / rate['st']:.2f}) | {floor:.0f} "
                f"| {rate['onnx'] / floor:.0%} / {rate['int8'] / floor:.0%} "
                f"| {min(loads):.1f}-{max(loads):.1f} |",
                flush=True,
            )


def _ndcg_recall_rr(task: MTEBRetrieval, D: np.ndarray, Q: np.ndarray, k: int = 10):
    """Per-query NDCG@k, recall@k and reciprocal rank@k (binary relevance, exact cosine)."""
    pos = {d: i for i, d in enumerate(task.doc_ids)}
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    nd, rec, rr = [], [], []
    for s in range(0, len(Q), 1024):
        S = Q[s : s + 1024] @ D.T
        top = np.argsort(-S, axis=1)[:, :k]
        for qi, row in enumerate(top, start=s):
            rel = {pos[d] for d, g in task.qrels[task.query_ids[qi]].items() if g > 0 and d in pos}
            hit = np.array([j in rel for j in row])
            ideal = disc[: min(len(rel), k)].sum()
            nd.append(float((hit * disc).sum() / ideal))
            rec.append(float(hit.sum() / len(rel)))
            rr.append(float(1.0 / (np.argmax(hit) + 1)) if hit.any() else 0.0)
    return np.array(nd), np.array(rec), np.array(rr)


def _paired_interval(a: np.ndarray, b: np.ndarray, resamples: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of mean(b - a) over queries (fixed seed)."""
    diff = b - a
    idx = np.random.default_rng(0).integers(0, diff.size, size=(resamples, diff.size))
    means = diff[idx].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def quality(args: argparse.Namespace, full: MTEBRetrieval) -> None:
    task = gcide_sample(full, args.docs)
    lee = lee_corpus()
    res, vecs, lee_r = {}, {}, {}
    for backend in ("onnx", "onnx-int8"):
        emb = Embedder(backend=backend, cache_dir=args.cache_dir)
        t = time.perf_counter()
        D = emb.encode(task.doc_texts)
        Q = emb.encode(task.query_texts)
        secs = time.perf_counter() - t
        res[backend] = _ndcg_recall_rr(task, D, Q)
        vecs[backend] = D
        V = emb.encode(lee.documents)
        sims = np.sum(V[lee.pairs[:, 0]] * V[lee.pairs[:, 1]], axis=1)
        lee_r[backend] = (stats.spearmanr(sims, lee.scores).statistic,
                          stats.pearsonr(sims, lee.scores).statistic, secs)  # fmt: skip
    print(
        f"\n## int8 quality: GCIDE retrieval, {len(task.query_ids):,} test queries, "
        f"{len(task.doc_ids):,} documents\n"
    )
    print("| backend | NDCG@10 | recall@10 | MRR@10 | Lee STS Spearman / Pearson | embed s |")
    print("|---|---|---|---|---|---|")
    for b in res:
        nd, rec, rr = res[b]
        sp, pe, secs = lee_r[b]
        print(f"| {b} | {nd.mean():.4f} | {rec.mean():.4f} | {rr.mean():.4f} "
              f"| {sp:.4f} / {pe:.4f} | {secs:.0f} |")  # fmt: skip
    print("\n| int8 - fp32 | mean | 95% interval | gate: lower end >= | passes |")
    print("|---|---|---|---|---|")
    passed = []
    for i, metric in enumerate(("NDCG@10", "recall@10", "MRR@10")):
        a, b = res["onnx"][i], res["onnx-int8"][i]
        lo, hi = _paired_interval(a, b)
        gate = -GATE * a.mean()
        ok = lo >= gate
        if i < 2:
            passed.append(ok)
        print(f"| {metric} | {b.mean() - a.mean():+.4f} | [{lo:+.4f}, {hi:+.4f}] "
              f"| {gate:+.4f} | {'yes' if ok else 'no'}{'' if i < 2 else ' (not gated)'} |")  # fmt: skip
    cos = np.sum(vecs["onnx"] * vecs["onnx-int8"], axis=1)
    print(
        f"\ncosine int8 to fp32 over the documents: min {cos.min():.4f}, mean {cos.mean():.4f}; "
        f"top-10 neighbour overlap {top_k_overlap(vecs['onnx'], vecs['onnx-int8']):.3f}"
    )
    print(f"\n**int8 quality gate: {'PASS' if all(passed) else 'FAIL'}** "
          f"(NDCG@10 and recall@10 within {GATE:.0%} of fp32 at 95% confidence)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gcide", type=Path, default=None, help="folder with gcide.index/.dict.dz")
    ap.add_argument("--part", choices=("speed", "quality", "all"), default="all")
    ap.add_argument("--per-bucket", type=int, default=300, help="texts per length bucket")
    ap.add_argument("--slices", type=int, default=3, help="interleaved timing slices per cell")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--docs", type=int, default=5000, help="quality: documents")
    ap.add_argument("--queries", type=int, default=1000, help="quality: test queries")
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()
    task = gcide_retrieval(args.gcide, split="test", max_queries=args.queries)
    if args.part in ("speed", "all"):
        speed(args, task)
    if args.part in ("quality", "all"):
        quality(args, task)


if __name__ == "__main__":
    main()
