"""Multivariate l2 Laplace: radius law, direction law, independence, expected cosine, guarantee.

The noise density is proportional to exp(-epsilon |z|): in polar form the radius is
Gamma(shape=d, scale=1/epsilon) and the direction is uniform on the sphere, independent of it.
For a uniform direction U and a fixed unit axis a, t = <U, a> satisfies
(t + 1)/2 ~ Beta((d-1)/2, (d-1)/2), E[t^2] = 1/d, E[t^4] = 3/(d(d+2)) ([A26] Thm 3).

Criteria (see ``_laws``): KS p > 1e-3; moments within 4.4 standard errors; fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import LaplaceMechanism, MetricDP, PureDP
from privembed.core import theory
from privembed.core.rng import as_generator
from privembed.mechanisms.base import GeneratorSource
from privembed.mechanisms.laplace import sample_l2_laplace

from ._laws import K_SE, assert_mean_within, check_radius_and_direction, unit_rows


@pytest.mark.parametrize(("epsilon", "d"), [(1.0, 2), (5.0, 3), (20.0, 16), (100.0, 384)])
def test_mechanism_noise_follows_l2_laplace(epsilon: float, d: int) -> None:
    m = LaplaceMechanism(epsilon=epsilon, renormalize=False)
    n = 20_000 if d < 384 else 8_000
    rng = np.random.default_rng(10 + d)
    X = unit_rows(rng, n, d)
    axis = unit_rows(rng, 1, d)[0]
    Z = m.privatize(X, rng=11) - X
    check_radius_and_direction(Z, epsilon, axis, what=f"eps={epsilon}, d={d}")


def test_sampler_alone_follows_l2_laplace() -> None:
    src = GeneratorSource(as_generator(12))
    Z = sample_l2_laplace(src, 20_000, 5, 2.5)
    check_radius_and_direction(Z, 2.5, np.eye(5)[2], what="sample_l2_laplace")


@pytest.mark.parametrize(
    ("epsilon", "d"), [(20.0, 16), pytest.param(500.0, 384, marks=pytest.mark.slow)]
)
def test_mean_cosine_matches_expected_cosine(epsilon: float, d: int) -> None:
    m = LaplaceMechanism(epsilon=epsilon)
    n = 5000
    X = unit_rows(np.random.default_rng(13), n, d)
    cos = np.einsum("ij,ij->i", X, m.privatize(X, rng=14))
    expected = m.expected_cosine(d)
    assert expected == theory.expected_cosine_laplace(epsilon, d)
    assert_mean_within(cos, expected, what="mean cosine")


def test_no_normalisation_with_input_norm_none() -> None:
    m = LaplaceMechanism(epsilon=4.0, input_norm="none", renormalize=False)
    n, d = 4000, 6
    x = np.array([5.0, -3.0, 0.0, 1.0, 2.0, -7.0])
    Y = m.privatize(np.tile(x, (n, 1)), rng=15)
    # E[Y] = x; each coordinate has variance E[R^2]/d = (d+1)/epsilon^2
    se = math.sqrt((d + 1) / 4.0**2) / math.sqrt(n)
    assert np.abs((Y.mean(axis=0) - x) / se).max() < K_SE


def test_expected_noise_norm_and_scale() -> None:
    m = LaplaceMechanism(epsilon=10.0)
    assert m.expected_noise_norm(384) == 38.4
    assert m.noise_scale == 0.1


def test_guarantee_metric_and_implied_ldp() -> None:
    g = LaplaceMechanism(epsilon=10.0).guarantee
    assert isinstance(g, MetricDP)
    assert g.epsilon == 10.0 and g.metric == "l2"
    assert len(g.implied) == 1 and isinstance(g.implied[0], PureDP)
    assert g.implied[0].epsilon == 20.0  # diameter 2 of the unit sphere
    clip = LaplaceMechanism(epsilon=10.0, input_norm="clip").guarantee
    assert clip.implied[0].epsilon == 20.0 and "ball" in clip.implied[0].neighbouring
    # without a bounded domain only the metric guarantee holds
    assert LaplaceMechanism(epsilon=10.0, input_norm="none").guarantee.implied == ()
