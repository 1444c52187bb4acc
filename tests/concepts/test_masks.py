"""Hard-concrete gates (eqs. 1, 2, 4), the hand-written training step, and mask recovery."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privembed import DataError
from privembed.concepts.masks import (
    GAMMA,
    XI,
    MaskLearner,
    _GatedProbe,
    deterministic_mask,
    expected_l0,
    gate_probabilities,
    hard_concrete_sample,
    learn_mask,
)

N_DRAWS = 200_000
K_SE = 5.0  # tolerance: 5 binomial standard errors (two-sided p ~ 6e-7 per check)


@pytest.mark.parametrize(
    ("log_alpha", "log_beta"),
    [
        (-2.0, math.log(2 / 3)),
        (0.0, math.log(2 / 3)),
        (1.5, math.log(2 / 3)),
        (0.5, math.log(0.3)),
        (-0.5, 0.4),
    ],
)
def test_sampling_matches_eq1_point_masses(log_alpha, log_beta):
    z = hard_concrete_sample([log_alpha], log_beta, size=N_DRAWS, rng=12345)[:, 0]
    assert z.min() >= 0.0 and z.max() <= 1.0
    p0, p1 = (float(p[0]) for p in gate_probabilities([log_alpha], [log_beta]))
    for observed, p in ((np.mean(z == 0.0), p0), (np.mean(z == 1.0), p1)):
        se = math.sqrt(p * (1 - p) / N_DRAWS)
        assert abs(observed - p) <= K_SE * se, (observed, p, se)
    # the continuous part lies strictly inside (0, 1)
    inner = z[(z > 0) & (z < 1)]
    assert inner.size > 0 and np.mean((z > 0) & (z < 1)) == pytest.approx(
        1 - p0 - p1, abs=K_SE * 0.0012
    )


def test_sampling_quantiles_match_eq1_cdf():
    # P(z <= t) for t in (0, 1): u <= sigmoid(beta * logit((t - gamma) / (xi - gamma)) - log_alpha)
    la, lb = 0.7, math.log(0.5)
    z = hard_concrete_sample([la], lb, size=N_DRAWS, rng=7)[:, 0]
    for t in (0.1, 0.3, 0.5, 0.8):
        q = (t - GAMMA) / (XI - GAMMA)
        cdf = 1 / (1 + math.exp(-(math.exp(lb) * math.log(q / (1 - q)) - la)))
        se = math.sqrt(cdf * (1 - cdf) / N_DRAWS)
        assert abs(np.mean(z <= t) - cdf) <= K_SE * se


def test_training_gates_are_eq1():
    """The gates of the training step equal eq. (1) on the same logistic noise."""
    d, n = 6, 50
    g = torch.Generator().manual_seed(0)
    net = _GatedProbe(torch, d, (4,), gated=True, generator=g)
    net.log_alpha.copy_(torch.linspace(-3, 3, d))
    net.log_beta.copy_(torch.linspace(-1, 0.5, d))
    u = np.random.default_rng(1).uniform(1e-6, 1 - 1e-6, size=(n, d)).astype(np.float32)
    noise = torch.from_numpy(np.log(u) - np.log1p(-u))
    net.step_grads(torch.ones(n, d), torch.ones(n), noise)
    m = net._buf(n)["m"].numpy()
    la, lb = net.log_alpha.double().numpy(), net.log_beta.double().numpy()
    s = 1 / (1 + np.exp(-(np.log(u) - np.log1p(-u) + la) / np.exp(lb)))
    np.testing.assert_allclose(m, np.clip(s * (XI - GAMMA) + GAMMA, 0, 1), atol=2e-6)


def test_manual_backward_equals_autograd():
    d, n, lam = 10, 24, 0.3
    net = _GatedProbe(
        torch, d, (7, 5), gated=True, lam=lam, generator=torch.Generator().manual_seed(3)
    )
    gen = torch.Generator().manual_seed(4)
    net.log_alpha.copy_(2 * torch.randn(d, generator=gen))
    net.log_beta.copy_(0.3 * torch.randn(d, generator=gen))
    x = torch.randn(n, d, generator=gen)
    y = (torch.rand(n, generator=gen) > 0.5).float()
    noise = torch.rand(n, d, generator=gen).clamp(1e-6, 1 - 1e-6).logit()
    loss = net.step_grads(x, y, noise)

    P = net.P.clone().double().requires_grad_()
    la, lb, *mlp = net._views(P, [tuple(p.shape) for p in net.params])
    beta = lb.exp()
    gate = torch.nn.functional.hardtanh(
        torch.sigmoid((noise.double() + la) / beta) * (XI - GAMMA) + GAMMA, 0.0, 1.0
    )
    h = x.double() * gate
    for i in range(0, len(mlp), 2):
        h = h @ mlp[i] + mlp[i + 1]
        if i < len(mlp) - 2:
            h = h.relu()
    cls = torch.nn.functional.binary_cross_entropy_with_logits(h.squeeze(1), y.double())
    reg = torch.sigmoid(la - beta * math.log(-GAMMA / XI)).sum()
    (cls + lam * reg).backward()
    assert float(loss) == pytest.approx(float(cls.detach()), rel=1e-5)
    np.testing.assert_allclose(net.G.numpy(), P.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_eq4_regulariser_against_direct_computation():
    rng = np.random.default_rng(0)
    la, lb = rng.normal(0, 2, size=40), rng.normal(-0.4, 0.3, size=40)
    direct = sum(
        1.0 / (1.0 + math.exp(-(a - math.exp(b) * math.log(-GAMMA / XI))))
        for a, b in zip(la, lb, strict=True)
    )
    assert expected_l0(la, lb) == pytest.approx(direct, rel=1e-12)
    # ... and against the fraction of non-zero gates actually drawn (Monte Carlo, 5 SE)
    z = hard_concrete_sample(la, lb, size=20_000, rng=5)
    p_nonzero = (z > 0).mean(axis=0)
    assert abs(p_nonzero.sum() - direct) <= K_SE * math.sqrt(
        np.sum(p_nonzero * (1 - p_nonzero) / 20_000)
    )
    # ... and the training loop's value
    net = _GatedProbe(torch, 40, (3,), gated=True, generator=torch.Generator().manual_seed(0))
    net.log_alpha.copy_(torch.from_numpy(la.astype(np.float32)))
    net.log_beta.copy_(torch.from_numpy(lb.astype(np.float32)))
    assert net.expected_l0() == pytest.approx(direct, rel=1e-5)


def test_eq2_deterministic_mask():
    la = np.array([-10.0, -math.log(11.0), 0.0, math.log(11.0), 10.0])
    np.testing.assert_allclose(deterministic_mask(la), [0.0, 0.0, 0.5, 1.0, 1.0], atol=1e-12)
    # it is the clipped median of eq. (1): sigma(log alpha) maps to s when the noise is 0
    assert deterministic_mask([0.3])[0] == pytest.approx(
        min(1, max(0, 1.2 / (1 + math.exp(-0.3)) - 0.1))
    )


def _concept_space(n_pairs, d, dims, seed):
    rng = np.random.default_rng(seed)
    neg = rng.standard_normal((n_pairs, d))
    pos = neg.copy()
    pos[:, dims] += rng.uniform(0.8, 1.6, size=(n_pairs, len(dims)))
    return pos, neg


@pytest.mark.slow
def test_learned_mask_recovers_concept_dimensions():
    d, dims = 48, [2, 9, 17, 30, 41]
    pos, neg = _concept_space(1000, d, dims, seed=0)
    res = MaskLearner(
        epochs=25, lr=0.02, lam=0.02, hidden=(32, 16), baseline_epochs=5, num_threads=1
    ).fit(pos, neg, rng=0)
    sel = set(res.selected.tolist())
    precision = len(sel & set(dims)) / max(1, len(sel))
    recall = len(sel & set(dims)) / len(dims)
    assert precision >= 0.9 and recall >= 0.9, (sorted(sel), res.mask.round(2))
    # the Bayes accuracy of this task is about 0.91; the masked probe loses little to the full one
    assert res.val_accuracy_masked is not None and res.val_accuracy_unmasked is not None
    assert res.val_accuracy_masked >= 0.8
    assert res.val_accuracy_masked >= res.val_accuracy_unmasked - 0.05
    assert res.sparsity == pytest.approx(1 - len(sel) / d)


def test_seeded_and_reproducible():
    pos, neg = _concept_space(120, 8, [1], seed=1)
    kw = dict(epochs=3, lr=0.01, hidden=(8,), baseline_epochs=1, num_threads=1)
    a = learn_mask(pos, neg, rng=3, **kw)
    b = learn_mask(pos, neg, rng=3, **kw)
    c = learn_mask(pos, neg, rng=4, **kw)
    np.testing.assert_array_equal(a.log_alpha, b.log_alpha)
    assert a.history == b.history and a.val_accuracy_unmasked == b.val_accuracy_unmasked
    assert not np.array_equal(a.log_alpha, c.log_alpha)
    assert a.n_train_pairs == 108 and a.n_val_pairs == 12 and a.val_index.size == 12


def test_early_stopping_is_reported():
    rng = np.random.default_rng(0)
    pos, neg = rng.standard_normal((100, 6)), rng.standard_normal((100, 6))  # nothing to learn
    res = MaskLearner(
        epochs=60, lr=0.05, lam=0.0, hidden=(64,), patience=3, baseline_epochs=0, num_threads=1
    ).fit(pos, neg, rng=0)
    assert res.stopped_early and res.epochs_run < 60
    assert res.best_epoch == res.epochs_run - 3
    assert len(res.history) == res.epochs_run and "val_loss" in res.history[0]


def test_parameter_and_data_errors():
    with pytest.raises(ValueError, match=r"lam must be >= 0, got lam=-1\."):
        MaskLearner(lam=-1)
    with pytest.raises(ValueError, match="patience needs a validation split"):
        MaskLearner(patience=2, val_fraction=0)
    with pytest.raises(ValueError, match="hidden must be a sequence of positive ints"):
        MaskLearner(hidden=(0,))
    with pytest.raises(ValueError, match=r"xi must be > 1, got xi=1\."):
        deterministic_mask([0.0], xi=1.0)
    with pytest.raises(DataError, match="same shape"):
        learn_mask(np.ones((4, 3)), np.ones((4, 2)))
    with pytest.raises(DataError, match="at least 2 pairs"):
        learn_mask(np.ones((1, 3)), np.ones((1, 3)))
    with pytest.raises(DataError, match="NaN or inf"):
        learn_mask(np.full((4, 3), np.nan), np.ones((4, 3)))
