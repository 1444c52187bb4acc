"""Tests for privembed.mechanisms.sketches: the JL-only sketch of Blocki et al. (central DP).

Every random draw has a fixed seed; the unbiasedness checks use exact (Wishart, chi-square)
standard errors.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from privembed.core.rng import as_generator
from privembed.mechanisms import JLSketch
from privembed.mechanisms.sketches import blocki_threshold


def test_sketch_refuses_small_singular_values() -> None:
    s = JLSketch(r=5, epsilon=10.0, delta=1e-3)
    w = blocki_threshold(10.0, 1e-3, 5)
    assert s.threshold == pytest.approx(w)
    A = as_generator(17).standard_normal((50, 4))  # singular values ~ 7, far below w ~ 111
    with pytest.raises(ValueError, match=r"^JL-only sketch refused: the smallest singular value"):
        s.release(A, rng=0)
    with pytest.raises(ValueError, match=r"is 0 but the guarantee needs >= 112\.4"):
        s.release(np.ones((2, 4)), rng=0)  # n < d: zero singular values
    # just below / at the floor w + row_bound
    U, _, Vt = np.linalg.svd(A, full_matrices=False)
    floor = s.required_singular_value
    with pytest.raises(ValueError, match="JL-only sketch refused"):
        s.release(U @ np.diag([floor * 0.999] * 4) @ Vt, rng=0)
    R = s.release(U @ np.diag([floor * 1.001] * 4) @ Vt, rng=0)
    assert R.shape == (5, 4)
    # smoothing makes every matrix acceptable and its covariance estimate unbiased-corrected
    sm = JLSketch(r=5, epsilon=10.0, delta=1e-3, smoothing=True)
    assert sm.release(A, rng=0).shape == (5, 4)
    assert "smoothing" in sm.guarantee.note and "one row" in sm.guarantee.neighbouring


def test_sketch_covariance_estimate_is_unbiased() -> None:
    sm = JLSketch(r=20, epsilon=50.0, delta=1e-3, smoothing=True)
    A = as_generator(18).standard_normal((30, 3))
    C = np.mean([sm.covariance_estimate(sm.release(A, rng=i)) for i in range(400)], axis=0)
    G = A.T @ A
    B = G + sm.threshold**2 * np.eye(3)
    # Var of (R^T R / r)_ij = (B_ii B_jj + B_ij²) / r (Wishart); mean of 400 draws
    se = np.sqrt((np.outer(np.diag(B), np.diag(B)) + B**2) / sm.r / 400)
    assert np.all(np.abs(C - G) <= 4.4 * se)


def test_graph_sketch_refusal_and_unbiased_cuts() -> None:
    s = JLSketch(r=4, epsilon=200.0, delta=1e-2)
    w = blocki_threshold(200.0, 1e-2, 4)
    with pytest.raises(ValueError, match=r"n_vertices=10 is below 2\*w\^2"):
        s.release_graph([(0, 1)], 10, rng=0)
    n = 30
    assert n >= 2 * w * w
    g = as_generator(19)
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if g.random() < 0.2]
    S = list(range(7))
    true_cut = sum((u in S) != (v in S) for u, v in edges)
    omega = s.graph_overlay_weight(n)
    quad = omega * 7 * (n - 7) + (1 - omega) * true_cut  # 1_S^T L 1_S
    T = 600
    est = np.array([s.release_graph(edges, n, rng=100 + t).cut(S) for t in range(T)])
    # ||M v||²/r ~ quad * chi²_r / r: Var(est) = 2 quad² / (r (1 - omega)²)
    se = math.sqrt(2 * quad**2 / s.r) / (1 - omega) / math.sqrt(T)
    assert abs(est.mean() - true_cut) <= 3 * se
    with pytest.raises(ValueError, match="edges must join two distinct vertices"):
        s.release_graph([(0, 0)], n, rng=0)


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: JLSketch(r=0, epsilon=1.0, delta=1e-5), ValueError, "r must be >= 1, got r=0."),
        (
            lambda: JLSketch(r=2, epsilon=1.0, delta=1e-5, smoothing="yes"),
            TypeError,
            "smoothing must be a bool, got smoothing='yes'.",
        ),
    ],
)
def test_parameter_errors(call, exc, message) -> None:
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        call()
