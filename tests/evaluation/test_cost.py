"""The cost budget of advise (issue 37.1): k' follows from a budget in the user's units (bytes,
milliseconds) and the corpus size, and every setting shows what a query costs."""

from __future__ import annotations

import pytest

from privembed.evaluation.cost import Budget, Rates, query_cost, sealed_cost
from privembed.evaluation.modes import advise_modes
from privembed.keys.payload import payload_size

from .test_modes import _corpus

#: fixed rates: no test depends on how fast this machine is
RATES = Rates(open_ms=0.01, scan_ms_per_mdim=1.0, source="given")


def test_bytes_are_candidates_times_vector_id_and_payload_plus_the_query() -> None:
    c = query_cost("rerank", n=1000, d=384, store_dim=384, depth=50, rates=RATES)
    assert c.bytes == 50 * (4 * 384 + 16 + payload_size(384)) + 4 * 384
    assert c.payloads == 50
    assert c.ms == pytest.approx(1.0 * 1000 * 384 / 1e6 + 0.01 * 50)
    plain = query_cost("plain", n=1000, d=384, store_dim=384, depth=10, rates=RATES)
    assert plain.payloads == 0 and plain.bytes == 10 * (4 * 384 + 16) + 4 * 384
    sub = query_cost("subspace+rerank", n=1000, d=384, store_dim=74, depth=50, rates=RATES)
    assert sub.bytes == 50 * (4 * 74 + 16 + payload_size(384)) + 4 * 74


def test_the_depth_cap_is_the_largest_k_whose_cost_fits() -> None:
    b = Budget(max_bytes=1e6)
    cap = b.depth_cap("rerank", n=10**6, d=384, store_dim=384, rates=RATES)
    fits = query_cost("rerank", n=10**6, d=384, store_dim=384, depth=cap, rates=RATES)
    over = query_cost("rerank", n=10**6, d=384, store_dim=384, depth=cap + 1, rates=RATES)
    assert fits.bytes <= 1e6 < over.bytes
    # a latency budget: the scan of n rows first, then payloads at open_ms each
    lat = Budget(max_bytes=None, max_latency_ms=10.0)
    cap = lat.depth_cap("rerank", n=1000, d=384, store_dim=384, rates=RATES)
    assert cap == int((10.0 - 0.384) // 0.01)
    assert lat.depth_cap("rerank", n=10**6, d=384, store_dim=384, rates=RATES) == 0
    # never more than the corpus
    assert Budget(max_bytes=1e12).depth_cap("rerank", n=500, d=8, store_dim=8, rates=RATES) == 500


@pytest.mark.parametrize("kw", [{"max_bytes": 0}, {"max_latency_ms": -1.0}, {"max_depth": 0}])
def test_a_bad_budget_is_refused_with_its_name(kw: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kw)).replace("max_bytes", "max_bytes_per")):
        Budget(**kw)


def test_a_larger_budget_buys_a_smaller_epsilon_and_every_setting_shows_its_cost() -> None:
    X, Q = _corpus(n=600, d=48)
    per = 4 * 48 + 16 + payload_size(48)
    small = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",),
                         max_bytes_per_query=30 * per, rates=RATES, seed=0)  # fmt: skip
    large = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",),
                         max_bytes_per_query=4e6, rates=RATES, seed=0)  # fmt: skip
    s, g = small.settings[0], large.settings[0]
    assert s.depth_cap == 29 and g.depth_cap == 600 // 4  # a quarter of the corpus at most
    assert s.cost is not None and s.cost.bytes <= 30 * per and s.depth <= 29
    assert g.epsilon is not None and s.epsilon is not None and g.epsilon < s.epsilon
    for adv in (small, large):
        line = adv.setting_line(adv.settings[0])
        assert "cost per query" in line and "MB" in line and "payloads opened" in line
        assert "budget" in adv.floor_text()
        assert adv.to_dict()["settings"][0]["cost_per_query"]["bytes"] > 0


def test_a_budget_that_cannot_pay_for_the_top_10_makes_the_mode_unavailable() -> None:
    X, Q = _corpus(n=300, d=48)
    adv = advise_modes(X, queries=Q, modes=("plain", "rerank"), mechanisms=("laplace",),
                       max_bytes_per_query=2000, rates=RATES, seed=0)  # fmt: skip
    rr = next(s for s in adv.settings if s.mode == "rerank")
    assert not rr.meets_floor and "budget" in rr.notes[0] and "k' = 10" in rr.notes[0]


def test_a_small_corpus_is_recommended_sealed_and_defended_against_every_attacker() -> None:
    """Issue 37: for the demo's 300 notes fetching every payload costs about 0.5 MB; a corpus of
    up to ~38,000 records of d = 384 fits the default one-time fetch (64 MB). Then the store holds
    no vector and every attacker without the key faces encryption, not epsilon."""
    from privembed.evaluation.threats import DEFENDS, THREATS

    X, Q = _corpus(n=300, d=384, clusters=30)
    adv = advise_modes(X, queries=Q, modes=("sealed", "plain", "rerank"),
                       mechanisms=("laplace",), rates=RATES, seed=0)  # fmt: skip
    r = adv.recommended
    assert r is not None and r.mode == "sealed" and r.epsilon is None
    assert r.cost is not None and r.cost.bytes == 0
    assert r.cost.sync_bytes == 300 * (16 + payload_size(384))
    assert {v.threat.name for v in r.verdicts} == {
        "store_only", "auxiliary_text", "candidate_holder", "repeated_release"
    }  # fmt: skip
    assert all(v.verdict == DEFENDS and "encryption" in v.reason for v in r.verdicts)
    assert adv.sentence().startswith("Recommended: mode sealed")
    text = "\n".join(adv.lines())
    assert "no epsilon: encryption" in text and THREATS["candidate_holder"].title in text
    # the other modes are still measured and shown, with their costs
    assert {s.mode for s in adv.settings} == {"sealed", "plain", "rerank"}


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"max_sync_bytes": 100_000}, "the one-time fetch of 300 payloads is over 100 kB"),
        ({"client_cache": False, "max_bytes_per_query": 100_000}, "every query fetches them all"),
    ],
)
def test_sealed_is_not_recommended_over_the_budget(kw: dict, why: str) -> None:
    X, Q = _corpus(n=300, d=384, clusters=30)
    adv = advise_modes(X, queries=Q, modes=("sealed", "rerank"), mechanisms=("laplace",),
                       rates=RATES, seed=0, **kw)  # fmt: skip
    sealed = next(s for s in adv.settings if s.mode == "sealed")
    assert not sealed.meets_floor and "over the budget" in sealed.notes[0], why
    assert adv.recommended is None or adv.recommended.mode != "sealed"


def test_a_large_corpus_is_too_large_to_fetch_whole_by_default() -> None:
    big = sealed_cost(n=117_659, d=384, rates=RATES)
    assert big.sync_bytes > 64e6 and not Budget().sealed_fits(big)
    assert Budget().sealed_fits(sealed_cost(n=5000, d=384, rates=RATES))


def test_the_cost_law_predicts_k_at_twice_the_corpus_within_its_stated_range() -> None:
    """Issue 38: k' at a fixed epsilon grows with the corpus. advise measures it at n/4, n/2 and
    n, fits n^b and predicts the user's production size; the prediction for 2n made from n
    records is checked against k' measured on all 2n (held out from the prediction)."""
    import numpy as np

    from privembed.evaluation import modes as M

    rng = np.random.default_rng(3)
    C = rng.standard_normal((40, 48))
    X = C[rng.integers(0, 40, 4000)] + 0.6 * rng.standard_normal((4000, 48))
    half = X[:2000]
    Q = M.advice_queries(half, seed=0)
    adv = advise_modes(half, queries=Q, modes=("rerank",), mechanisms=("laplace",), rates=RATES,
                       max_bytes_per_query=1e9, production_size=4000, seed=0)  # fmt: skip
    p = adv.prediction
    assert p is not None and p.target_n == 4000 and p.sizes == (500, 1000, 2000)
    assert 0.3 < p.exponent < 1.0 and p.low <= p.depth <= p.high
    assert p.text() in adv.lines() and adv.to_dict()["prediction"]["depth"] == p.depth
    full = M._Clean(M._unit(X), M._unit(Q))
    runner = M._ModeRunner("rerank", "laplace", {}, full, floor=0.9, metric="recall",
                           max_depth=4000, seed=0, basis=None, draws=3)  # fmt: skip
    measured = runner.probe(p.epsilon)
    assert measured is not None and measured.ok
    assert p.low <= measured.depth <= p.high, (p.text(), measured.depth)
