"""The randomness policy: one ``rng`` parameter, one place that picks the bit generator."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import GaussianMechanism, LaplaceMechanism
from privembed.core import rng
from privembed.core.rng import as_generator, spawn, use_bit_generator


def _draw(g: np.random.Generator) -> np.ndarray:
    return g.standard_normal(4)


def test_int_seed_is_reproducible() -> None:
    np.testing.assert_array_equal(_draw(as_generator(7)), _draw(as_generator(7)))
    np.testing.assert_array_equal(_draw(as_generator(np.int64(7))), _draw(as_generator(7)))
    assert not np.array_equal(_draw(as_generator(7)), _draw(as_generator(8)))


def test_none_is_fresh_entropy() -> None:
    assert not np.array_equal(_draw(as_generator(None)), _draw(as_generator(None)))
    assert not np.array_equal(_draw(as_generator()), _draw(as_generator()))


def test_generator_is_used_as_is() -> None:
    g = np.random.default_rng(3)
    assert as_generator(g) is g


@pytest.mark.parametrize(
    ("value", "exc", "message"),
    [
        (-1, ValueError, "rng seed must be >= 0, got rng=-1."),
        (True, TypeError, "rng must be an int, a numpy.random.Generator or None, got rng=True."),
        (1.5, TypeError, "rng must be an int, a numpy.random.Generator or None, got rng=1.5."),
        ("7", TypeError, "rng must be an int, a numpy.random.Generator or None, got rng='7'."),
    ],
)
def test_bad_rng_values(value, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        as_generator(value)
    assert str(info.value) == message


def test_default_bit_generator_is_pcg64() -> None:
    assert rng.bit_generator_name() == "pcg64"
    assert isinstance(as_generator(1).bit_generator, np.random.PCG64)


def test_use_bit_generator_switches_and_restores() -> None:
    base = _draw(as_generator(5))
    with use_bit_generator("philox"):
        assert rng.bit_generator_name() == "philox"
        g = as_generator(5)
        assert isinstance(g.bit_generator, np.random.Philox)
        philox = _draw(g)
    assert rng.bit_generator_name() == "pcg64"
    assert not np.array_equal(base, philox)
    expected = np.random.Generator(np.random.Philox(np.random.SeedSequence(5)))
    np.testing.assert_array_equal(philox, _draw(expected))
    with pytest.raises(RuntimeError), use_bit_generator("sfc64"):
        raise RuntimeError("boom")
    assert rng.bit_generator_name() == "pcg64"


def test_set_bit_generator_rejects_unknown_names() -> None:
    with pytest.raises(ValueError) as info:
        rng.set_bit_generator("mersenne")
    msg = str(info.value)
    assert msg.startswith("bit generator must be one of 'pcg64'") or "'pcg64'" in msg
    assert msg.endswith("got name='mersenne'.")
    assert rng.bit_generator_name() == "pcg64"


def test_register_bit_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rng._FACTORIES, "mt19937", np.random.MT19937)
    with use_bit_generator("mt19937"):
        assert isinstance(as_generator(1).bit_generator, np.random.MT19937)
    with pytest.raises(TypeError) as info:
        rng.register_bit_generator("broken", 42)  # type: ignore[arg-type]
    assert str(info.value) == "factory must be callable, got factory=42."


def test_mechanisms_follow_the_policy() -> None:
    """Mechanism code only calls the Generator; the policy alone decides the bit generator."""
    X = np.eye(6)[:3] + 0.1
    m = GaussianMechanism(epsilon=3.0, delta=1e-6)
    with use_bit_generator("philox"):
        a = m.privatize(X, rng=11)
    b = m.privatize(X, rng=np.random.Generator(np.random.Philox(np.random.SeedSequence(11))))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, m.privatize(X, rng=11))


@pytest.mark.parametrize("name", ["aes", "chacha"])
def test_cryptographic_generators(name: str) -> None:
    X = np.eye(5)[:2] + 0.2
    m = LaplaceMechanism(epsilon=20.0)
    with use_bit_generator(name):
        a, b = m.privatize(X, rng=4), m.privatize(X, rng=4)
        fresh = m.privatize(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, fresh)
    assert not np.array_equal(a, m.privatize(X, rng=4))


def test_spawn_children_are_reproducible_and_distinct() -> None:
    a = [_draw(g) for g in spawn(3, 3)]
    b = [_draw(g) for g in spawn(3, 3)]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])
    # children of fresh entropy differ run to run; children of a Generator advance with it
    assert not np.array_equal(_draw(spawn(None, 1)[0]), _draw(spawn(None, 1)[0]))
    parent = np.random.default_rng(9)
    c1, c2 = spawn(parent, 1)[0], spawn(parent, 1)[0]
    assert not np.array_equal(_draw(c1), _draw(c2))
    assert spawn(3, 0) == []


@pytest.mark.parametrize("n", [-1, 1.5, True])
def test_spawn_rejects_bad_counts(n) -> None:
    with pytest.raises(ValueError) as info:
        spawn(0, n)
    assert str(info.value) == f"n must be a non-negative integer, got n={n!r}."


def test_spawn_validates_the_seed() -> None:
    with pytest.raises(ValueError, match="rng seed must be >= 0"):
        spawn(-3, 2)
