"""Per-query cost of private search with re-rank over 100,000 stored vectors (no store).

The untrusted side: exact inner-product search over the protected vectors (FAISS flat index,
one thread) for the top k' = 1,000. The trusted side: open the k' payloads
(:class:`privembed.keys.payload.PayloadCodec`, AES-256-GCM) and re-rank by exact cosine with the clean
query. Synthetic data (random unit vectors, Laplace epsilon 200 on the stored ones): the cost does
not depend on the content. What a store adds (fetching the payloads from disk or a server) is
not in these numbers.

Run: ``nice -n 10 python docs/experiments/rerank_benchmark.py``
"""

from __future__ import annotations

import time

import faiss
import numpy as np

from privembed import get_mechanism
from privembed.keys.payload import PayloadCodec

N, D, KP, K, Q = 100_000, 384, 1000, 10, 200


def main() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = get_mechanism("laplace", epsilon=200.0).privatize(X, rng=1)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    codec = PayloadCodec(bytes(range(32)))
    t0 = time.perf_counter()
    payloads = codec.seal_many(X, ids=list(range(N)), collection="bench")
    seal_s = time.perf_counter() - t0
    faiss.omp_set_num_threads(1)
    index = faiss.IndexFlatIP(D)
    index.add(np.ascontiguousarray(Y, dtype=np.float32))
    queries = X[rng.choice(N, Q, replace=False)]
    search, rerank = [], []
    for q in queries:
        t0 = time.perf_counter()
        _, cand = index.search(q[None, :], KP)
        t1 = time.perf_counter()
        ids = cand[0].tolist()
        V = codec.vectors([payloads[i] for i in ids], ids=ids, collection="bench")
        top = cand[0][np.argsort(-(V @ q))[:K]]
        t2 = time.perf_counter()
        assert top.size == K
        search.append(t1 - t0)
        rerank.append(t2 - t1)
    total = np.add(search, rerank)
    print(f"{N} vectors, d={D}, k'={KP}: sealing {N / seal_s:,.0f} payloads/s")
    print(
        f"per query (median / p90 ms): search {1e3 * np.median(search):.1f} / "
        f"{1e3 * np.quantile(search, 0.9):.1f}, open + re-rank {1e3 * np.median(rerank):.1f} / "
        f"{1e3 * np.quantile(rerank, 0.9):.1f}, total {1e3 * np.median(total):.1f} / "
        f"{1e3 * np.quantile(total, 0.9):.1f}"
    )


if __name__ == "__main__":
    main()
