"""Shared helpers of the attacks: torch access, seeding, MLP training, word tokens, protection.

torch is imported lazily (extra ``learn``); nothing here touches torch's global random state:
models are initialised inside :func:`torch.random.fork_rng` after ``torch.manual_seed`` with a
seed drawn from the caller's ``rng``, and minibatches are shuffled by a numpy generator.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_embeddings, check_int, check_real, check_training
from ..core.rng import as_generator, spawn

__all__ = [
    "as_token_sets",
    "check_hidden",
    "protect_copies",
    "seed_from",
    "simulate_release",
    "word_tokens",
]

_WORD = re.compile(r"\w+")


def by_frequency(
    groups: Iterable[Iterable[str]],
    *,
    min_count: int,
    limit: int | None,
    skip: Container[str] = (),
) -> list[str]:
    """The tokens of ``groups`` seen at least ``min_count`` times (every occurrence counts),
    most frequent first (ties: alphabetical), the first ``limit`` (``None``: all), none of
    ``skip``: the order the attacks' vocabularies keep their tokens in.

    Examples
    --------
    >>> by_frequency([["b", "a", "b"], ["a", "c"]], min_count=1, limit=2)
    ['a', 'b']
    """
    counts: Counter[str] = Counter()
    for g in groups:
        counts.update(g)
    items = sorted(
        ((t, c) for t, c in counts.items() if c >= min_count and t not in skip),
        key=lambda tc: (-tc[1], tc[0]),
    )
    return [t for t, _ in items[:limit]]


def decoded(
    ids: Iterable[int], tokens: Sequence[str], *, end: int, silent: Container[int]
) -> list[str]:
    """The tokens a decoder's ids stand for, up to the first ``end`` id, without the
    ``silent`` ones (padding, the start symbol).

    Examples
    --------
    >>> decoded([1, 4, 3, 2, 4], ["<pad>", "<bos>", "<eos>", "x", "y"], end=2, silent=(0, 1))
    ['y', 'x']
    """
    out = []
    for i in ids:
        i = int(i)
        if i == end:
            break
        if i not in silent:
            out.append(tokens[i])
    return out


class TokenIndex:
    """Tokens in a fixed order and each one's position: what the attacks' vocabularies share
    (the subclasses check their tokens before handing them here)."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)


def torch_module() -> Any:
    """The torch module, or an ImportError naming the ``learn`` extra."""
    return require("torch", "learn", purpose="trained attacks")


def seed_from(rng: Any) -> int:
    """A 63-bit seed drawn from ``rng`` (for ``torch.manual_seed``)."""
    return int(as_generator(rng).integers(2**63 - 1))


@contextlib.contextmanager
def torch_threads(torch: Any, n: int | None) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads (restored afterwards); None keeps the setting."""
    if n is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def check_hidden(hidden: Any) -> tuple[int, ...]:
    """Validate a sequence of hidden-layer sizes."""
    if isinstance(hidden, int | str) or not all(
        isinstance(h, int | np.integer) and not isinstance(h, bool) and h >= 1 for h in hidden
    ):
        raise ValueError(f"hidden must be a sequence of positive ints, got hidden={hidden!r}.")
    return tuple(int(h) for h in hidden)


def build_mlp(torch: Any, d_in: int, hidden: Sequence[int], d_out: int, seed: int) -> Any:
    """``Linear-ReLU`` stack ending in a linear layer, initialised under ``torch.manual_seed(seed)``."""
    nn = torch.nn
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[Any] = []
        prev = d_in
        for h in hidden:
            layers += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        layers.append(nn.Linear(prev, d_out))
        return nn.Sequential(*layers)


def train_minibatch(
    torch: Any,
    model: Any,
    loss_fn: Any,
    X: Any,
    Y: Any,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    gen: np.random.Generator,
    weight_decay: float = 0.0,
    on_epoch: Callable[[int], None] | None = None,
) -> list[float]:
    """Adam over shuffled minibatches; returns the mean training loss of every epoch.

    ``on_epoch(done)`` is called after every epoch with the number of epochs done (progress).
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    n = X.shape[0]
    history = []
    model.train()
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(n))
        total = 0.0
        for s in range(0, n, batch_size):
            idx = order[s : s + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        history.append(total / n)
        if on_epoch is not None:
            on_epoch(len(history))
    model.eval()
    return history


class MLPFit:
    """An attack whose model is an MLP trained on shuffled minibatches (token inference, the
    fingerprint classifier): the one training call, made from the attack's ``hidden``,
    ``epochs``, ``batch_size``, ``lr``, ``weight_decay`` and ``num_threads``."""

    hidden: Sequence[int]
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    num_threads: int | None
    model_: Any

    def _set_training(
        self, hidden: Sequence[int], epochs: int, batch_size: int, lr: float,
        weight_decay: float, num_threads: int | None,
    ) -> None:  # fmt: skip
        """Check and keep the training hyper-parameters (the constructor's, in the order the
        class docstring names them)."""
        self.hidden = check_hidden(hidden)
        self.epochs, self.batch_size, self.lr, self.num_threads = check_training(
            epochs, batch_size, lr, num_threads
        )
        self.weight_decay = check_real("weight_decay", weight_decay, ge=0)

    def _fit_mlp(
        self, torch: Any, loss_fn: Any, inputs: NDArray[np.float32], targets: NDArray[Any],
        d_out: int, gen: np.random.Generator, on_epoch: Callable[[int], None] | None = None,
    ) -> list[float]:  # fmt: skip
        """A new ``model_`` (seeded from ``gen``) trained on ``inputs`` -> ``targets``; the mean
        loss of every epoch."""
        with torch_threads(torch, self.num_threads):
            self.model_ = build_mlp(torch, inputs.shape[1], self.hidden, d_out, seed_from(gen))
            return train_minibatch(
                torch, self.model_, loss_fn, torch.from_numpy(inputs), torch.from_numpy(targets),
                epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                weight_decay=self.weight_decay, gen=gen, on_epoch=on_epoch,
            )  # fmt: skip


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+`` runs) of ``text``, in order.

    Examples
    --------
    >>> word_tokens("Jane Doe, 45 y/o, from St. Louis.")
    ['jane', 'doe', '45', 'y', 'o', 'from', 'st', 'louis']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}.")
    return [w.lower() for w in _WORD.findall(text)]


def as_token_sets(items: Iterable[Any], name: str = "texts") -> list[frozenset[str]]:
    """Texts (tokenised with :func:`word_tokens`) or iterables of tokens -> sets of tokens.

    Examples
    --------
    >>> [sorted(s) for s in as_token_sets(["A cat, a dog.", ["x", "Y"]])]
    [['a', 'cat', 'dog'], ['x', 'y']]
    """
    if isinstance(items, str):
        raise TypeError(f"{name} must be a sequence of texts or token sets, not a single string.")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append(frozenset(word_tokens(item)))
        elif isinstance(item, Iterable):
            toks = list(item)
            bad = [t for t in toks if not isinstance(t, str)]
            if bad:
                raise TypeError(f"{name}[{i}] holds a non-string token {bad[0]!r}.")
            out.append(frozenset(t.lower() for t in toks))
        else:
            raise TypeError(f"{name}[{i}] must be a text or a set of tokens, got {item!r}.")
    if not out:
        raise DataError(f"{name} must be non-empty.")
    return out


def embeddings_f64(X: Any, name: str = "X") -> NDArray[np.float64]:
    """A validated (n, d) float64 copy of an embedding batch."""
    arr, _ = check_embeddings(X, name=name)
    return np.array(arr, dtype=np.float64)


def simulate_release(
    mechanism: Any,
    X: Any,
    *,
    rng: Any = None,
    key: bytes | None = None,
    ids: Any = None,
) -> NDArray[Any]:
    """One release of ``X`` through ``mechanism`` (fresh noise from ``rng``, or keyed noise by
    ``key`` and the records' ``ids``, through the release path: an attack simulates exactly the
    release it audits). Keyed noise without ids is refused as :class:`privembed.release.Release`
    refuses it: row numbers are not record ids."""
    if key is not None:
        from ..release import protect as release

        if ids is None:
            raise DataError(
                "keyed noise needs record ids (row numbers are not ids: another file's row 5 "
                "is another record); pass ids=..."
            )
        return release(X, mechanism, ids=ids, key=key)
    return mechanism.privatize(X, rng=rng)


def protect_copies(mechanism: Any, X: Any, n_copies: int, *, rng: Any = None) -> NDArray[Any]:
    """``n_copies`` independent fresh releases of ``X`` stacked row-wise: shape (n_copies * n, d).

    The adaptive attacker ([T26] App. I.3) protects its own auxiliary embeddings with the very
    mechanism and parameters it attacks; several copies are data augmentation.
    """
    n_copies = check_int("n_copies", n_copies, ge=1)
    return np.concatenate([mechanism.privatize(X, rng=g) for g in spawn(rng, n_copies)])


def standard_scale(
    X: NDArray[np.float64], enabled: bool = True
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean and scale for z-scoring the columns of ``X`` (``enabled=False``: 0 and 1).

    A column whose standard deviation is below ``1e-6`` times the largest one is constant up to
    rounding (all-MiniLM-L6-v2 has such dimensions: sd ~1e-33 and ~1e-9 on clinical notes) and
    keeps scale 1: dividing by its rounding residue would multiply any later perturbation of that
    coordinate by up to 1e30 and make an attacker trained on clean vectors blind to vectors that
    moved by 1e-3.

    Examples
    --------
    >>> mu, sd = standard_scale(np.array([[0.0, 5.0], [2.0, 5.0 + 1e-15]]))
    >>> mu.tolist(), sd.tolist()
    ([1.0, 5.0], [1.0, 1.0])
    """
    if not enabled:
        return np.zeros(X.shape[1]), np.ones(X.shape[1])
    sd = X.std(axis=0)
    return X.mean(axis=0), np.where(sd > 1e-6 * sd.max(initial=0.0), sd, 1.0)


def check_fraction(name: str, value: Any) -> float:
    return check_real(name, value, gt=0, lt=1)
