r"""Learn which embedding dimensions carry a concept: hard-concrete gates and an MLP probe.

SPARSE ([T26] §3.1, Algorithm 2) learns a mask :math:`m \in [0, 1]^d` such that a classifier
reading only :math:`\Phi(s) \odot m` still separates sentences with a concept (D+) from the same
sentences without it (D-), while an expected-L0 penalty closes every gate it can. The gates
follow the hard-concrete distribution of [L18], with learnable :math:`\log\alpha_i` and
:math:`\log\beta_i` per dimension and the stretch interval :math:`(\gamma, \xi) = (-0.1, 1.1)`:

.. math::
    u \sim U(0, 1),\quad
    s_i = \sigma\!\Big(\frac{\log u - \log(1-u) + \log\alpha_i}{\beta_i}\Big),\quad
    m_i = \min\!\big(1, \max(0,\ s_i(\xi - \gamma) + \gamma)\big)            \qquad (1)

    \hat m_i = \min\!\big(1, \max(0,\ \sigma(\log\alpha_i)(\xi - \gamma) + \gamma)\big)
    \qquad \text{(deterministic mask at inference)}                          \qquad (2)

    \hat y = \mathrm{MLP}(\Phi(s) \odot m)                                    \qquad (3)

    \mathcal L_{reg} = \sum_{i=1}^{d} P(m_i \neq 0)
                     = \sum_{i=1}^{d} \sigma\!\Big(\log\alpha_i - \beta_i \log\frac{-\gamma}{\xi}\Big)
                                                                             \qquad (4)

    \mathcal L = \mathcal L_{cls} + \lambda\,\mathcal L_{reg}                  \qquad (5)

with :math:`\mathcal L_{cls}` the binary cross-entropy of the probe. The exact gate
probabilities are :math:`P(m_i = 0) = \sigma(\beta_i \log(-\gamma/\xi) - \log\alpha_i)` and
:math:`P(m_i = 1) = \sigma(\log\alpha_i - \beta_i \log((1-\gamma)/(\xi-1)))`.

Defaults follow [T26] App. H.2: probe MLP with hidden layers 256 and 128 (ReLU), Adam with
learning rate 1e-4, 100 epochs, batch 64, :math:`\lambda = 10^{-3}`; every one is a parameter.
Training runs on precomputed embeddings (float32 tensors; the noise of a whole epoch is drawn in
bulk), so it needs the ``learn`` extra (torch) but no embedding model.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). §3.1, Algorithm 2, App. H.2.
.. [L18] Louizos, Welling, Kingma (2018). Learning sparse neural networks through L0
   regularization. ICLR. §4 (hard concrete distribution).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from ..core._optional import require
from ..core._validation import DataError, check_embeddings, check_int, check_real, check_training
from ..core.rng import as_generator

__all__ = [
    "GAMMA",
    "XI",
    "MaskLearner",
    "MaskResult",
    "deterministic_mask",
    "expected_l0",
    "gate_probabilities",
    "hard_concrete_sample",
    "learn_mask",
]

#: upper end of the stretch interval ([T26], [L18])
XI = 1.1
#: lower end of the stretch interval ([T26], [L18])
GAMMA = -0.1
_U_EPS = 1e-6  # u is clipped to [eps, 1 - eps] before the logit


def _check_stretch(xi: float, gamma: float) -> tuple[float, float]:
    xi = check_real("xi", xi, gt=1)
    gamma = check_real("gamma", gamma, lt=0)
    return xi, gamma


def _params(log_alpha: Any, log_beta: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    la = np.asarray(log_alpha, dtype=np.float64)
    lb = np.broadcast_to(np.asarray(log_beta, dtype=np.float64), la.shape)
    if not (np.isfinite(la).all() and np.isfinite(lb).all()):
        raise ValueError("log_alpha and log_beta must be finite.")
    return la, lb


def hard_concrete_sample(
    log_alpha: Any,
    log_beta: Any,
    *,
    size: int | None = None,
    rng: Any = None,
    xi: float = XI,
    gamma: float = GAMMA,
) -> NDArray[np.float64]:
    r"""Draw hard-concrete gates, eq. (1).

    Parameters
    ----------
    log_alpha : array_like, shape (d,)
        Location :math:`\log\alpha_i` of each gate.
    log_beta : float or array_like, shape (d,)
        Log temperature :math:`\log\beta_i` (broadcast against ``log_alpha``).
    size : int, optional
        Number of draws; the result then has shape ``(size, d)``.
    rng : int, numpy.random.Generator or None
    xi, gamma : float
        Stretch interval, ``xi > 1`` and ``gamma < 0``.

    Returns
    -------
    ndarray
        Gates in [0, 1], with exact zeros and ones.

    Examples
    --------
    >>> z = hard_concrete_sample([0.0, 3.0], np.log(2 / 3), size=5, rng=0)
    >>> z.shape, bool(((z >= 0) & (z <= 1)).all())
    ((5, 2), True)
    """
    xi, gamma = _check_stretch(xi, gamma)
    la, lb = _params(log_alpha, log_beta)
    shape = la.shape if size is None else (check_int("size", size, ge=1), *la.shape)
    u = np.clip(as_generator(rng).random(shape), _U_EPS, 1.0 - _U_EPS)
    s = expit((np.log(u) - np.log1p(-u) + la) / np.exp(lb))
    return np.clip(s * (xi - gamma) + gamma, 0.0, 1.0)


def deterministic_mask(
    log_alpha: Any, *, xi: float = XI, gamma: float = GAMMA
) -> NDArray[np.float64]:
    r"""The inference-time mask, eq. (2): :math:`\min(1, \max(0, \sigma(\log\alpha)(\xi-\gamma)+\gamma))`.

    Examples
    --------
    >>> deterministic_mask([-5.0, 0.0, 5.0]).round(3).tolist()
    [0.0, 0.5, 1.0]
    """
    xi, gamma = _check_stretch(xi, gamma)
    la = np.asarray(log_alpha, dtype=np.float64)
    return np.clip(expit(la) * (xi - gamma) + gamma, 0.0, 1.0)


def gate_probabilities(
    log_alpha: Any, log_beta: Any, *, xi: float = XI, gamma: float = GAMMA
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Exact :math:`P(m_i = 0)` and :math:`P(m_i = 1)` of the gates of eq. (1).

    Examples
    --------
    >>> p0, p1 = gate_probabilities([0.0], [0.0])
    >>> round(float(p0[0] + p1[0]), 4)   # log(0.1/1.1) = -log(11): p0 = 1/12, p1 = 1/12
    0.1667
    """
    xi, gamma = _check_stretch(xi, gamma)
    la, lb = _params(log_alpha, log_beta)
    beta = np.exp(lb)
    p0 = expit(beta * math.log(-gamma / xi) - la)
    p1 = expit(la - beta * math.log((1.0 - gamma) / (xi - 1.0)))
    return p0, p1


def expected_l0(log_alpha: Any, log_beta: Any, *, xi: float = XI, gamma: float = GAMMA) -> float:
    r"""The regulariser of eq. (4): :math:`\sum_i P(m_i \neq 0)`.

    Examples
    --------
    >>> round(expected_l0([0.0, 0.0], [0.0, 0.0]), 4)   # 2 * (1 - 1/12)
    1.8333
    """
    p0, _ = gate_probabilities(log_alpha, log_beta, xi=xi, gamma=gamma)
    return float((1.0 - p0).sum())


# ---------------------------------------------------------------------------------------------
# the training loop (torch, manual backward on flat parameter buffers)
# ---------------------------------------------------------------------------------------------


def _torch() -> Any:
    return require("torch", "learn", purpose="concept mask learning")


class _GatedProbe:
    """Hard-concrete gates (optional) in front of an MLP, with a hand-written backward pass.

    All parameters live in one flat float32 buffer ``P`` (gradients in ``G``), laid out as
    ``[log_alpha, log_beta,] W_1, b_1, ..., W_L, b_L`` with ``W_l`` of shape (in, out). A step
    is a fixed sequence of fused torch kernels on preallocated buffers -- no autograd graph, no
    per-sample Python -- and Adam updates the flat buffers in six vector operations. The
    gradients equal autograd's for eqs. (1), (3)-(5) (checked in the tests).
    """

    def __init__(
        self,
        torch: Any,
        d: int,
        hidden: Sequence[int],
        *,
        gated: bool,
        xi: float = XI,
        gamma: float = GAMMA,
        lam: float = 0.0,
        init_log_alpha: float = 0.0,
        init_log_beta: float = math.log(2.0 / 3.0),
        generator: Any = None,
    ) -> None:
        self.torch, self.d, self.gated = torch, d, gated
        self.xi, self.gamma, self.lam = xi, gamma, lam
        self.k = xi - gamma
        self.c = math.log(-gamma / xi)
        sizes = (d, *hidden, 1)
        shapes: list[tuple[int, ...]] = [(d,), (d,)] if gated else []
        for fan_in, fan_out in itertools.pairwise(sizes):
            shapes += [(fan_in, fan_out), (fan_out,)]
        total = sum(math.prod(sh) for sh in shapes)
        self.P = torch.zeros(total)
        self.G = torch.zeros(total)
        self.params = self._views(self.P, shapes)
        self.grads = self._views(self.G, shapes)
        off = 2 if gated else 0
        self.W, self.b = self.params[off::2], self.params[off + 1 :: 2]
        self.gW, self.gb = self.grads[off::2], self.grads[off + 1 :: 2]
        for W, b, fan_in in zip(self.W, self.b, sizes[:-1], strict=True):
            bound = 1.0 / math.sqrt(fan_in)  # torch.nn.Linear's default initialisation
            W.uniform_(-bound, bound, generator=generator)
            b.uniform_(-bound, bound, generator=generator)
        if gated:
            self.log_alpha, self.log_beta = self.params[0], self.params[1]
            self.g_log_alpha, self.g_log_beta = self.grads[0], self.grads[1]
            self.log_alpha.normal_(0.0, 0.01, generator=generator).add_(init_log_alpha)
            self.log_beta.fill_(init_log_beta)
            self._gamma_vec = torch.full((d,), gamma)
            self._k = torch.tensor(self.k)
        self._buffers: dict[int, dict[str, Any]] = {}

    @staticmethod
    def _views(flat: Any, shapes: list[tuple[int, ...]]) -> list[Any]:
        out, off = [], 0
        for sh in shapes:
            size = math.prod(sh)
            out.append(flat[off : off + size].view(sh))
            off += size
        return out

    def _buf(self, n: int) -> dict[str, Any]:
        if n not in self._buffers:
            e = self.torch.empty
            self._buffers[n] = {
                "z": e(n, self.d),
                "s": e(n, self.d),
                "g": e(n, self.d),
                "m": e(n, self.d),
                "h0": e(n, self.d),
                "dh0": e(n, self.d),
                "a": [e(n, W.shape[1]) for W in self.W],
                "da": [e(n, W.shape[0]) for W in self.W[1:]],
            }
        return self._buffers[n]

    def mask(self) -> Any:
        """Deterministic mask, eq. (2)."""
        torch = self.torch
        return torch.clamp(torch.sigmoid(self.log_alpha) * self.k + self.gamma, 0.0, 1.0)

    def expected_l0(self) -> float:
        """Eq. (4) at the current parameters."""
        torch = self.torch
        return float(torch.sigmoid(self.log_alpha - self.log_beta.exp() * self.c).sum())

    def logits(self, X: Any, mask: Any = None, block: int = 8192) -> Any:
        """Probe outputs for ``X * mask`` (no gradients)."""
        torch = self.torch
        out = []
        for s in range(0, X.shape[0], block):
            h = X[s : s + block] if mask is None else X[s : s + block] * mask
            for i, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
                h = torch.addmm(b, h, W)
                if i < len(self.W) - 1:
                    h.relu_()
            out.append(h.squeeze(1))
        return torch.cat(out)

    def step_grads(self, x: Any, y: Any, noise: Any = None) -> Any:
        """Fill ``G`` with the gradient of eq. (5) on one batch; return the batch's BCE loss.

        ``noise`` is logistic noise ``log u - log(1 - u)`` of shape ``x.shape``: one draw of the
        gates per example (gated probes only).
        """
        torch = self.torch
        aten = torch.ops.aten
        n = x.shape[0]
        buf = self._buf(n)
        if self.gated:
            inv_beta = self.log_beta.neg().exp()
            # eq. (1): z = (noise + log_alpha) / beta, s = sigmoid(z), g = s (xi - gamma) + gamma
            z = torch.addcmul(self.log_alpha * inv_beta, noise, inv_beta, out=buf["z"])
            s = torch.sigmoid(z, out=buf["s"])
            g = torch.addcmul(self._gamma_vec, s, self._k, out=buf["g"])
            m = torch.clamp(g, 0.0, 1.0, out=buf["m"])
            h = torch.mul(x, m, out=buf["h0"])  # eq. (3): Phi(s) * m
        else:
            h = x
        hs = [h]
        for i, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
            a = torch.addmm(b, hs[-1], W, out=buf["a"][i])
            if i < len(self.W) - 1:
                a.relu_()
            hs.append(a)
        out = hs[-1].squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, y)
        delta = torch.sigmoid(hs[-1]).sub_(y.unsqueeze(1)).div_(n)
        for i in range(len(self.W) - 1, -1, -1):
            torch.mm(hs[i].t(), delta, out=self.gW[i])
            torch.sum(delta, 0, out=self.gb[i])
            if i > 0:
                d_prev = torch.mm(delta, self.W[i].t(), out=buf["da"][i - 1])
                delta = aten.threshold_backward(d_prev, hs[i], 0)
        if self.gated:
            dh0 = torch.mm(delta, self.W[0].t(), out=buf["dh0"])
            dz = aten.sigmoid_backward(aten.hardtanh_backward(dh0.mul_(x), g, 0.0, 1.0), s)
            torch.sum(dz, 0, out=self.g_log_alpha)
            torch.sum(dz.mul_(z), 0, out=self.g_log_beta)
            self.g_log_alpha.mul_(inv_beta).mul_(self.k)
            self.g_log_beta.mul_(-self.k)
            if self.lam:
                # eq. (4): d/dlog_alpha and d/dlog_beta of lam * sum sigmoid(log_alpha - beta c)
                beta = self.log_beta.exp()
                r = torch.sigmoid(self.log_alpha - beta * self.c)
                r.mul_(1.0 - r).mul_(self.lam)
                self.g_log_alpha.add_(r)
                self.g_log_beta.add_(r.mul_(beta).mul_(-self.c))
        return loss


class _Adam:
    """Adam (Kingma & Ba 2015, no weight decay) on one flat parameter buffer."""

    def __init__(
        self,
        torch: Any,
        P: Any,
        G: Any,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.P, self.G = P, G
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.m = torch.zeros_like(P)
        self.v = torch.zeros_like(P)
        self.denom = torch.zeros_like(P)
        self.t = 0
        self.torch = torch

    def step(self) -> None:
        self.t += 1
        self.m.lerp_(self.G, 1.0 - self.b1)
        self.v.mul_(self.b2).addcmul_(self.G, self.G, value=1.0 - self.b2)
        self.torch.sqrt(self.v, out=self.denom)
        self.denom.div_(math.sqrt(1.0 - self.b2**self.t)).add_(self.eps)
        self.P.addcdiv_(self.m, self.denom, value=-self.lr / (1.0 - self.b1**self.t))


@dataclass(frozen=True)
class MaskResult:
    """A learned concept mask and how it was obtained.

    Attributes
    ----------
    mask : ndarray, shape (d,)
        The deterministic mask of eq. (2), in [0, 1].
    log_alpha, log_beta : ndarray, shape (d,)
        The learned gate parameters.
    val_accuracy_masked : float or None
        Accuracy of the probe on the held-out pairs, reading :math:`\\Phi(s) \\odot \\hat m`.
    val_accuracy_unmasked : float or None
        Accuracy of a probe of the same architecture trained on the full embeddings (the
        reference: how separable D+ and D- are at all). None if that probe was not trained.
    train_accuracy_masked : float
    n_train_pairs, n_val_pairs : int
    epochs_run, best_epoch : int
        Epochs trained, and the epoch whose parameters were kept (early stopping).
    stopped_early : bool
    history : list of dict
        Per epoch: ``train_loss``, ``expected_l0``, ``n_open``, ``val_loss``, ``val_accuracy``.
    params : dict
        The training parameters.
    seconds : float
        Wall time of training (both probes).
    val_index : ndarray of int
        Rows of ``X_pos``/``X_neg`` held out for validation.
    """

    mask: NDArray[np.float64]
    log_alpha: NDArray[np.float64]
    log_beta: NDArray[np.float64]
    val_accuracy_masked: float | None
    val_accuracy_unmasked: float | None
    train_accuracy_masked: float
    n_train_pairs: int
    n_val_pairs: int
    epochs_run: int
    best_epoch: int
    stopped_early: bool
    history: list[dict[str, float]] = field(repr=False)
    params: dict[str, Any] = field(repr=False)
    seconds: float = 0.0
    val_index: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    @property
    def dim(self) -> int:
        return int(self.mask.shape[0])

    @property
    def selected(self) -> NDArray[np.int64]:
        """Indices of the dimensions the mask keeps (m > 0)."""
        return np.flatnonzero(self.mask > 0)

    @property
    def sparsity(self) -> float:
        """Fraction of dimensions the mask closes exactly (m = 0)."""
        return float(np.mean(self.mask == 0))

    def summary(self) -> dict[str, Any]:
        """Scalars for reports and profile metadata."""
        return {
            "dim": self.dim,
            "sparsity": self.sparsity,
            "n_selected": int(self.selected.size),
            "mask_mean": float(self.mask.mean()),
            "val_accuracy_masked": self.val_accuracy_masked,
            "val_accuracy_unmasked": self.val_accuracy_unmasked,
            "train_accuracy_masked": self.train_accuracy_masked,
            "n_train_pairs": self.n_train_pairs,
            "n_val_pairs": self.n_val_pairs,
            "epochs_run": self.epochs_run,
            "best_epoch": self.best_epoch,
            "stopped_early": self.stopped_early,
            "seconds": self.seconds,
        }


class MaskLearner:
    r"""Learn a concept mask from paired embeddings (SPARSE, [T26] Algorithm 2).

    Parameters
    ----------
    epochs : int, default 100
    batch_size : int, default 64
        Examples (not pairs) per step; D+ and D- examples are shuffled together.
    lr : float, default 1e-4
        Adam learning rate (gates and probe).
    lam : float, default 1e-3
        Weight :math:`\lambda` of the expected-L0 term, eq. (5).
    hidden : sequence of int, default (256, 128)
        Hidden layer sizes of the MLP probe (ReLU).
    xi, gamma : float, default 1.1, -0.1
        Stretch interval of the gates.
    init_log_alpha : float, default 0.0
        Initial :math:`\log\alpha` (plus N(0, 0.01^2) jitter, as in [L18]); 0 gives every gate
        :math:`\hat m = 0.5` at the start.
    init_log_beta : float, default log(2/3)
        Initial :math:`\log\beta` ([L18]'s temperature 2/3).
    val_fraction : float in [0, 0.9], default 0.1
        Share of *pairs* held out (both members of a pair on the same side).
    patience : int, optional
        Early stopping: stop when the validation objective
        :math:`\mathcal L_{cls} + \lambda \mathcal L_{reg}` (deterministic mask) has not improved
        for ``patience`` epochs, and keep the best epoch's parameters. Off by default.
    baseline_epochs : int, default 20
        Epochs of the reference probe on unmasked embeddings (0: skip it). It uses
        ``baseline_lr`` (1e-3) and ``baseline_batch_size`` (256), a shorter schedule than the
        masked probe's; it only calibrates "how separable are D+ and D-".
    num_threads : int or None, default 1
        torch intra-op threads while training (restored afterwards); None keeps torch's setting.
        The steps are small matrix products, where more threads mostly add synchronisation.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> neg = rng.standard_normal((200, 8)); pos = neg.copy(); pos[:, 0] += 4.0
    >>> res = MaskLearner(epochs=30, lr=0.05, lam=0.05, baseline_epochs=0).fit(pos, neg, rng=0)
    >>> res.selected.tolist(), res.val_accuracy_masked > 0.9
    ([0], True)
    """

    def __init__(
        self,
        *,
        epochs: int = 100,
        batch_size: int = 64,
        lr: float = 1e-4,
        lam: float = 1e-3,
        hidden: Sequence[int] = (256, 128),
        xi: float = XI,
        gamma: float = GAMMA,
        init_log_alpha: float = 0.0,
        init_log_beta: float = math.log(2.0 / 3.0),
        val_fraction: float = 0.1,
        patience: int | None = None,
        baseline_epochs: int = 20,
        baseline_lr: float = 1e-3,
        baseline_batch_size: int = 256,
        num_threads: int | None = 1,
    ) -> None:
        self.epochs, self.batch_size, self.lr, self.num_threads = check_training(
            epochs, batch_size, lr, num_threads
        )
        self.lam = check_real("lam", lam, ge=0)
        if isinstance(hidden, int | str) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden
        ):
            raise ValueError(f"hidden must be a sequence of positive ints, got hidden={hidden!r}.")
        self.hidden = tuple(int(h) for h in hidden)
        self.xi, self.gamma = _check_stretch(xi, gamma)
        self.init_log_alpha = check_real("init_log_alpha", init_log_alpha)
        self.init_log_beta = check_real("init_log_beta", init_log_beta)
        self.val_fraction = check_real("val_fraction", val_fraction, ge=0, le=0.9)
        self.patience = None if patience is None else check_int("patience", patience, ge=1)
        if self.patience is not None and self.val_fraction == 0:
            raise ValueError("patience needs a validation split, got val_fraction=0.")
        self.baseline_epochs = check_int("baseline_epochs", baseline_epochs, ge=0)
        self.baseline_lr = check_real("baseline_lr", baseline_lr, gt=0)
        self.baseline_batch_size = check_int("baseline_batch_size", baseline_batch_size, ge=1)

    def get_params(self) -> dict[str, Any]:
        """The training parameters (recorded in profiles)."""
        return {
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "lam": self.lam,
            "hidden": list(self.hidden),
            "xi": self.xi,
            "gamma": self.gamma,
            "init_log_alpha": self.init_log_alpha,
            "init_log_beta": self.init_log_beta,
            "val_fraction": self.val_fraction,
            "patience": self.patience,
            "baseline_epochs": self.baseline_epochs,
            "baseline_lr": self.baseline_lr,
            "baseline_batch_size": self.baseline_batch_size,
            "optimizer": "adam",
        }

    def __repr__(self) -> str:
        return (
            f"MaskLearner(epochs={self.epochs}, batch_size={self.batch_size}, lr={self.lr!r}, "
            f"lam={self.lam!r}, hidden={self.hidden})"
        )

    # -----------------------------------------------------------------------------------------

    def fit(
        self,
        X_pos: Any,
        X_neg: Any,
        *,
        rng: Any = None,
        on_epoch: Callable[[dict[str, float]], None] | None = None,
    ) -> MaskResult:
        """Learn the mask from aligned embeddings of D+ (``X_pos``) and D- (``X_neg``).

        Parameters
        ----------
        X_pos, X_neg : array_like, shape (n_pairs, d)
            Row j of ``X_neg`` embeds R(s_j, C) for the sentence s_j of row j of ``X_pos``.
        rng : int, numpy.random.Generator or None
            Seeds the split, the initialisation, the shuffling and the gate noise.
        on_epoch : callable, optional
            Called with each epoch's history entry (progress reporting).

        Raises
        ------
        DataError
            Shapes differ, fewer than 2 pairs, or NaN/inf values.
        """
        P, _ = check_embeddings(X_pos, name="X_pos", allow_zero=True)
        N, _ = check_embeddings(X_neg, name="X_neg", allow_zero=True)
        if P.shape != N.shape:
            raise DataError(
                f"X_pos and X_neg must have the same shape, got {P.shape} and {N.shape}."
            )
        n_pairs = P.shape[0]
        if n_pairs < 2:
            raise DataError(f"need at least 2 pairs to learn a mask, got {n_pairs}.")
        torch = _torch()
        gen = as_generator(rng)
        previous_threads = torch.get_num_threads()
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        try:
            return self._fit(torch, P, N, gen, on_epoch)
        finally:
            if self.num_threads is not None:
                torch.set_num_threads(previous_threads)

    def _split(
        self, n_pairs: int, gen: np.random.Generator
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        order = gen.permutation(n_pairs)
        n_val = round(self.val_fraction * n_pairs)
        if self.val_fraction > 0:
            n_val = min(max(n_val, 1), n_pairs - 1)
        return np.sort(order[n_val:]), np.sort(order[:n_val])

    @staticmethod
    def _stack(torch: Any, P: Any, N: Any, idx: NDArray[np.int64]) -> tuple[Any, Any]:
        X = np.concatenate([P[idx], N[idx]]).astype(np.float32, copy=False)
        y = np.concatenate([np.ones(idx.size, np.float32), np.zeros(idx.size, np.float32)])
        return torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(y)

    def _fit(
        self,
        torch: Any,
        P: NDArray[Any],
        N: NDArray[Any],
        gen: np.random.Generator,
        on_epoch: Callable[[dict[str, float]], None] | None,
    ) -> MaskResult:
        t0 = time.perf_counter()
        n_pairs, d = P.shape
        tr, va = self._split(n_pairs, gen)
        Xtr, ytr = self._stack(torch, P, N, tr)
        Xva, yva = self._stack(torch, P, N, va) if va.size else (None, None)
        tgen = torch.Generator().manual_seed(int(gen.integers(2**63 - 1)))
        net = _GatedProbe(
            torch,
            d,
            self.hidden,
            gated=True,
            xi=self.xi,
            gamma=self.gamma,
            lam=self.lam,
            init_log_alpha=self.init_log_alpha,
            init_log_beta=self.init_log_beta,
            generator=tgen,
        )
        opt = _Adam(torch, net.P, net.G, self.lr)
        n, B = Xtr.shape[0], self.batch_size
        chunk = max(B, (4096 // B) * B)  # rows of gate noise drawn at once
        xbuf = torch.empty(B, d)
        history: list[dict[str, float]] = []
        best: tuple[float, int, Any] = (math.inf, 0, None)
        stopped = False
        with torch.no_grad():
            for epoch in range(1, self.epochs + 1):
                perm = torch.from_numpy(gen.permutation(n))
                loss_sum = torch.zeros(())
                for c0 in range(0, n, chunk):
                    rows = min(chunk, n - c0)
                    noise = torch.from_numpy(gen.random((rows, d), dtype=np.float32))
                    noise.logit_(_U_EPS)
                    for s in range(0, rows, B):
                        idx = perm[c0 + s : c0 + s + B]
                        xb = torch.index_select(Xtr, 0, idx, out=xbuf[: idx.shape[0]])
                        loss = net.step_grads(xb, ytr[idx], noise[s : s + idx.shape[0]])
                        opt.step()
                        loss_sum += loss * idx.shape[0]
                entry = self._epoch_entry(net, epoch, float(loss_sum) / n, Xva, yva)
                history.append(entry)
                if on_epoch is not None:
                    on_epoch(entry)
                if self.patience is not None:
                    objective = entry["val_loss"] + self.lam * entry["expected_l0"]
                    if objective < best[0] - 1e-6:
                        best = (objective, epoch, net.P.clone())
                    elif epoch - best[1] >= self.patience:
                        stopped = True
                        break
            best_epoch = len(history)
            if self.patience is not None and best[2] is not None:
                best_epoch = best[1]
                net.P.copy_(best[2])
            la = net.log_alpha.double().numpy().copy()
            lb = net.log_beta.double().numpy().copy()
            mask = deterministic_mask(la, xi=self.xi, gamma=self.gamma)
            mask_t = torch.from_numpy(mask.astype(np.float32))
            train_acc = _accuracy(net.logits(Xtr, mask_t), ytr)
            val_masked = _accuracy(net.logits(Xva, mask_t), yva) if Xva is not None else None
            val_unmasked = None
            if self.baseline_epochs and Xva is not None:
                val_unmasked = self._baseline(torch, Xtr, ytr, Xva, yva, gen, tgen)
        return MaskResult(
            mask=mask,
            log_alpha=la,
            log_beta=lb,
            val_accuracy_masked=val_masked,
            val_accuracy_unmasked=val_unmasked,
            train_accuracy_masked=train_acc,
            n_train_pairs=int(tr.size),
            n_val_pairs=int(va.size),
            epochs_run=len(history),
            best_epoch=best_epoch,
            stopped_early=stopped,
            history=history,
            params=self.get_params(),
            seconds=time.perf_counter() - t0,
            val_index=va,
        )

    def _epoch_entry(
        self, net: _GatedProbe, epoch: int, train_loss: float, Xva: Any, yva: Any
    ) -> dict[str, float]:
        torch = net.torch
        mhat = net.mask()
        entry = {
            "epoch": float(epoch),
            "train_loss": train_loss,
            "expected_l0": net.expected_l0(),
            "n_open": float((mhat > 0).sum()),
        }
        if Xva is not None:
            logits = net.logits(Xva, mhat)
            entry["val_loss"] = float(
                torch.nn.functional.binary_cross_entropy_with_logits(logits, yva)
            )
            entry["val_accuracy"] = _accuracy(logits, yva)
        return entry

    def _baseline(
        self,
        torch: Any,
        Xtr: Any,
        ytr: Any,
        Xva: Any,
        yva: Any,
        gen: np.random.Generator,
        tgen: Any,
    ) -> float:
        net = _GatedProbe(torch, Xtr.shape[1], self.hidden, gated=False, generator=tgen)
        opt = _Adam(torch, net.P, net.G, self.baseline_lr)
        n, B = Xtr.shape[0], self.baseline_batch_size
        for _ in range(self.baseline_epochs):
            perm = torch.from_numpy(gen.permutation(n))
            for s in range(0, n, B):
                idx = perm[s : s + B]
                net.step_grads(Xtr[idx], ytr[idx])
                opt.step()
        return _accuracy(net.logits(Xva), yva)


def _accuracy(logits: Any, y: Any) -> float:
    return float(((logits > 0).float() == y).float().mean())


def learn_mask(X_pos: Any, X_neg: Any, *, rng: Any = None, **params: Any) -> MaskResult:
    """Shortcut for ``MaskLearner(**params).fit(X_pos, X_neg, rng=rng)``."""
    return MaskLearner(**params).fit(X_pos, X_neg, rng=rng)
