"""Embedding throughput and fidelity: torch vs ONNX Runtime (fp32, int8), one run, one machine.

Run::

    apt-get download dict-gcide && dpkg-deb -x dict-gcide_*.deb /tmp/gcide
    python benchmarks/bench_embed.py --gcide /tmp/gcide/usr/share/dictd \
        [--n 10000] [--queries 1000] [--slices 20] [--cache-dir /tmp/pe-cache]

Texts: ``--n`` GCIDE definition units (real dictionary text, ``"<headword>: <definition>"``,
:func:`privembed.evaluation.loaders.gcide_retrieval`): those relevant to ``--queries`` test
queries plus a deterministic sample of the rest. The texts are cut into ``--slices`` slices and
every backend embeds slice 1, then every backend slice 2, and so on (the order rotating), so
load from other processes falls on all backends alike; texts/s is all texts over the summed
time, and the per-slice ratios show the spread. Backends:

- ``torch (st.encode)``: ``SentenceTransformer.encode(texts, batch_size=64)``, what
  ``Embedder`` did before the ONNX backend (the baseline);
- ``torch (Embedder)``: ``Embedder(backend="torch")`` (per-batch calls, progress by rows);
- ``onnx``, ``onnx-int8``: ``Embedder(backend=...)`` on all cores.

Fidelity: cosine of each backend's vectors to the baseline's; top-10 nearest-neighbour overlap
on the same texts (cosine, self excluded); GCIDE retrieval (usage quote with the headword
masked -> the definition it stands under) recall@10 and MRR@10 over the timed texts; and
Spearman/Pearson correlation with the human judgments of the Lee corpus (50 documents, 1,225
pairs; gensim's test data).

Floor: the encoder's multiply-adds for the real tokens (no padding) against this machine's
measured float32 GEMM rate (the best of numpy's BLAS, torch and onnxruntime, on the same
threads, measured between the slices) give the best texts/s that dense float32 arithmetic
allows.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--gcide", type=Path, default=None, help="folder with gcide.index and gcide.dict.dz"
    )
    ap.add_argument("--n", type=int, default=10_000, help="documents (the timed texts)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--slices", type=int, default=20, help="interleaved timing slices")
    ap.add_argument("--latency-calls", type=int, default=200, help="single-text calls")
    ap.add_argument(
        "--threads", type=int, default=None, help="threads for torch and onnxruntime (all cores)"
    )
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--skip-torch-embedder", action="store_true")
    args = ap.parse_args()

    task = gcide_sample(args.gcide, args.n, args.queries)
    texts = task.doc_texts
    import torch
    from sentence_transformers import SentenceTransformer

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    t = time.perf_counter()
    embedders = {
        name: Embedder(
            backend=name, batch_size=args.batch_size, threads=threads, cache_dir=args.cache_dir
        )
        for name in ("onnx", "onnx-int8")
    }
    setup = time.perf_counter() - t
    torch_emb = Embedder(backend="torch", batch_size=args.batch_size)
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

    # interleaved: every backend embeds slice 1, then slice 2, ... (the order rotates), so
    # load from other processes falls on all backends alike; all slices make all texts
    bounds = np.linspace(0, len(texts), args.slices + 1).astype(int)
    secs: dict[str, list[float]] = {k: [] for k in runs}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in runs}
    loads = []
    names = list(runs)
    meter = gemm_meter(threads)
    gemms: dict[str, float] = {}
    for j, (a, b) in enumerate(itertools.pairwise(bounds)):
        for name in names[j % len(names) :] + names[: j % len(names)]:
            t = time.perf_counter()
            parts[name].append(runs[name](texts[a:b]))
            secs[name].append(time.perf_counter() - t)
        loads.append(os.getloadavg()[0])
        for lib, rate in meter().items():
            gemms[lib] = max(gemms.get(lib, 0.0), rate)
    out = {k: np.concatenate(v) for k, v in parts.items()}
    # one request's latency (a proxy embedding one short text), interleaved the same way
    lat: dict[str, list[float]] = {k: [] for k in runs}
    for j in range(args.latency_calls):
        for name in names:
            t = time.perf_counter()
            runs[name](texts[j % len(texts)])
            lat[name].append(time.perf_counter() - t)

    base = "torch (st.encode)"
    ref = out[base]
    lee = lee_corpus()
    lee_vecs = {name: fn(lee.documents) for name, fn in runs.items()}
    scores = {
        name: retrieval_scores(task, out[name], fn(task.query_texts)) for name, fn in runs.items()
    }
    lengths = np.array(embedders["onnx"].count_tokens(texts))
    gemm_lib = max(gemms, key=gemms.__getitem__)
    gemm = gemms[gemm_lib]
    f_min = model_flops(lengths)

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
        f"{args.slices} interleaved slices; 1-min load average during the timing "
        f"{min(loads):.1f}-{max(loads):.1f}; ONNX export + int8 quantisation on first use "
        f"(or cache load): {setup:.1f} s.\n"
    )
    print(
        f"tokens per text (with [CLS]/[SEP], truncated at 256): mean {lengths.mean():.1f}, "
        f"median {np.median(lengths):.0f}, max {lengths.max()}\n"
    )
    print(
        "| backend | texts/s | x baseline (slices: min-max) | 1 text: median / p99 ms "
        "| cosine to baseline: min / mean "
        "| top-10 NN overlap | Lee STS Spearman / Pearson | GCIDE recall@10 / MRR@10 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in runs:
        r = len(texts) / sum(secs[name])
        per = np.array(secs[base]) / np.array(secs[name])
        cos = np.sum(out[name] * ref, axis=1)
        V = lee_vecs[name] / np.linalg.norm(lee_vecs[name], axis=1, keepdims=True)
        sims = np.sum(V[lee.pairs[:, 0]] * V[lee.pairs[:, 1]], axis=1)
        sp = stats.spearmanr(sims, lee.scores).statistic
        pe = stats.pearsonr(sims, lee.scores).statistic
        nn = top_k_overlap(ref, out[name]) if name != base else 1.0
        print(
            f"| {name} | {r:.0f} | {sum(secs[base]) / sum(secs[name]):.2f} "
            f"({per.min():.2f}-{per.max():.2f}) "
            f"| {np.median(lat[name]) * 1e3:.1f} / {np.quantile(lat[name], 0.99) * 1e3:.1f} "
            f"| {cos.min():.6f} / {cos.mean():.6f} | {nn:.3f} | {sp:.4f} / {pe:.4f} "
            f"| {scores[name][0]:.4f} / {scores[name][1]:.4f} |"
        )
    print(
        f"\nfloor: {f_min / len(texts) / 1e6:.0f} MFLOP per text (the encoder's multiply-adds "
        f"for the real tokens, no padding); measured float32 GEMM {gemm / 1e9:.0f} GFLOP/s "
        f"({gemm_lib}, {threads} threads) -> at most "
        f"{gemm / f_min * len(texts):.0f} texts/s in float32 (GEMM GFLOP/s: "
        + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in gemms.items())
        + ")."
    )
    for name in runs:
        useful = len(texts) / sum(secs[name]) * f_min / len(texts)
        print(f"- {name}: {useful / 1e9:.1f} GFLOP/s of useful work, {useful / gemm:.0%} of GEMM")
    print(f"\nmodel: {resolve_model(None)[1]}")


if __name__ == "__main__":
    main()
