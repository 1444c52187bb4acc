"""Analysis helpers: output proportions, calibration, neighbour gaps, tables and figures."""

from __future__ import annotations

import numpy as np
import pytest

from privembed.text import (
    Table,
    Vocabulary,
    calibrate_rank_c,
    dot_product_summary,
    neighbour_gaps,
    output_proportions,
    plot_dot_cdf,
    plot_proportions,
    rank_fix_shares,
)
from privembed.text.analysis import neighbour_lists


def test_proportions_rows_sum_to_one_and_limits(vocab, index):
    t = output_proportions(
        vocab,
        epsilons=[0.01, 1e5],
        c=[0.05, 1e3],
        n_words=60,
        neighbours=10,
        index=index,
        rng=0,
    )
    assert len(t.rows) == 2 * (1 + 2 + 1)
    for r in t.rows:
        assert r["original"] + r["neighbours"] + r["other"] == pytest.approx(1.0)
        assert r["n_words"] == 60
    get = {(r["mechanism"], r["epsilon"], r["c"]): r for r in t.rows}
    assert get[("nearest", 1e5, None)]["original"] == 1.0
    assert get[("exponential", 1e5, None)]["original"] == 1.0
    assert get[("rank", 1e5, 1e3)]["original"] == 1.0  # eps * c huge: the rank step keeps x*
    # eps -> 0: the exponential mechanism is uniform, so mostly "other" (expected 389/400)
    assert get[("exponential", 0.01, None)]["other"] > 0.8


def test_rank_fix_moves_mass_to_close_neighbours(vocab, index):
    """With x* = w (large eps), eps * c ~ 0.3 spreads the output over w's first neighbours."""
    t = output_proportions(
        vocab, epsilons=[1e4], mechanisms=["rank"], c=[3e-5], n_words=200, index=index, rng=1
    )
    row = t.rows[0]
    # P(rank 0) = 1 - e^{-0.3} ~ 0.26; P(1 <= rank <= 100) ~ 0.74
    assert 0.18 < row["original"] < 0.34 and row["neighbours"] > 0.6


def test_neighbour_lists_put_the_word_first_even_with_duplicates():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [5.0, 5.0]], dtype=np.float32)
    voc = Vocabulary(words=list("abcd"), vectors=X)
    from privembed.text import NearestNeighbourIndex

    lists = neighbour_lists(NearestNeighbourIndex(X), [1, 0], 2)
    assert lists[0].tolist() == [1, 0, 2] and lists[1].tolist() == [0, 1, 2]
    g = neighbour_gaps(voc, words=[0], far_rank=2)
    assert g.z_w_x1[0] == 0.0 and g.z_x1_x2[0] == pytest.approx(0.5)


def test_neighbour_gaps_on_random_vocabulary(vocab, index):
    g = neighbour_gaps(vocab, n_words=100, index=index, rng=3)
    assert g.z_w_x1.shape == (100,) and np.all(g.z_w_x1 > 0)
    assert np.all(g.z_x1_x2 >= -1e-9) and np.all(np.isfinite(g.z_x1_x101))
    s = g.summary()
    assert [r["statistic"] for r in s.rows] == ["z_w_x1", "z_x1_x2", "z_x1_x101"]
    assert g.means()["z_w_x1"] == pytest.approx(g.z_w_x1.mean())


def test_calibrate_rank_c_picks_from_the_grid(vocab, index):
    cal = calibrate_rank_c(
        vocab, epsilons=[1e4], c_grid=[1e-6, 3e-5, 1.0], n_words=100, index=index, rng=0
    )
    # eps*c = 0.01: spread over ~100 ranks; 0.3: mostly close neighbours; 1e4: always w
    assert cal.c == 3e-5
    assert set(cal.score) == {1e-6, 3e-5, 1.0} and cal.score[1.0] == 0.0
    with pytest.raises(ValueError, match="c_grid must not be empty"):
        calibrate_rank_c(vocab, epsilons=[1.0], c_grid=[])


def test_dot_product_summary_monte_carlo_agrees():
    t = dot_product_summary(50, [5.0, 20.0], gaps={"g": 0.3}, mc_size=40_000, rng=1)
    for r in t.rows:
        p = r["P(Z>g)"]
        assert abs(r["MC(Z>g)"] - p) < 5 * np.sqrt(p * (1 - p) / 40_000)
        assert p <= r["bound(Z>g)"] <= 1.0


def test_table_writers(tmp_path):
    t = Table(columns=["name", "x", "c"], rows=[{"name": "a", "x": 0.123456, "c": None}])
    t.to_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines() == ["name,x,c", "a,0.123456,"]
    assert t.to_markdown(digits=2).splitlines()[-1] == "| a | 0.12 |  |"


def test_plots_write_png_files(tmp_path, vocab, index):
    t = output_proportions(
        vocab, epsilons=[1.0, 50.0], n_words=20, neighbours=5, index=index, rng=0
    )
    plot_proportions(t, tmp_path / "p.png", title="toy")
    plot_dot_cdf([8], tmp_path / "d.png", epsilon=3.0, mc_size=1000, rng=0)
    for name in ("p.png", "d.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no rows"):
        plot_proportions(Table(columns=["mechanism"]), tmp_path / "x.png")


def test_bad_arguments(vocab):
    with pytest.raises(ValueError, match="mechanism must be one of"):
        output_proportions(vocab, epsilons=[1.0], mechanisms=["laplace"])
    with pytest.raises(ValueError, match=r"epsilon must be > 0, got epsilon=-2\."):
        output_proportions(vocab, epsilons=[-2])
    with pytest.raises(ValueError, match="epsilons must not be empty"):
        output_proportions(vocab, epsilons=[])
    with pytest.raises(ValueError, match=r"n_words must be <= 400"):
        neighbour_gaps(vocab, n_words=401)


def test_rank_fix_shares_match_sampled_ranks():
    from privembed.text.sanitizer import sample_ranks

    eps, c, V, K, N = 20.0, 0.003, 5000, 100, 200_000
    r = sample_ranks(eps * c, N, V, np.random.default_rng(0))
    shares = rank_fix_shares(eps, c, vocab_size=V, neighbours=K)
    emp = {"original": (r == 0).mean(), "neighbours": ((r >= 1) & (r <= K)).mean()}
    for k, p in emp.items():
        assert abs(p - shares[k]) < 5 * np.sqrt(shares[k] * (1 - shares[k]) / N)
    assert sum(shares.values()) == pytest.approx(1.0)
