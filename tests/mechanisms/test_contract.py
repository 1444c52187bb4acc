"""Contract tests shared by every registered mechanism (STYLE.md "Tests").

One parametrised class runs over every entry of ``privembed.mechanisms.MECHANISMS``. Each
registered name needs a row in ``CASES`` (valid parameters, the parameter errors it must raise
with their exact messages, and the epsilon its guarantee must state); a mechanism registered
without one fails :func:`test_every_registered_mechanism_has_a_case` loudly.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from privembed import DataError
from privembed.core import theory
from privembed.core.accounting import Guarantee, guarantee_from_dict
from privembed.core.rng import as_generator
from privembed.mechanisms import MECHANISMS, Mechanism, get_mechanism

D = 16  # dimension used throughout the contract tests

#: registered mechanisms whose authors test them elsewhere (tests/mechanisms/test_projection.py)
TESTED_ELSEWHERE = frozenset({"projection"})


def _spd(d: int, seed: int) -> np.ndarray:
    B = np.random.default_rng(seed).standard_normal((d, d))
    return B @ B.T / d + 0.5 * np.eye(d)


_FULL = _spd(D, 11)
_DIAG = np.linspace(0.5, 3.0, D)
_MASK = (np.arange(D) % 3 == 0).astype(float)
#: an orthonormal basis of 6 directions in R^D with a centre (the subspace mechanism)
_BASIS = np.linalg.qr(np.random.default_rng(12).standard_normal((D, 6)))[0].T
_CENTRE = np.random.default_rng(13).standard_normal(D) * 0.1

# Errors shared by every mechanism that takes epsilon.
_EPS_ERRORS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"epsilon": -1}, ValueError, "epsilon must be > 0, got epsilon=-1."),
    ({"epsilon": 0.0}, ValueError, "epsilon must be > 0, got epsilon=0."),
    ({"epsilon": math.nan}, ValueError, "epsilon must be finite, got epsilon=nan."),
    ({"epsilon": math.inf}, ValueError, "epsilon must be finite, got epsilon=inf."),
    ({"epsilon": "5"}, TypeError, "epsilon must be a real number, got epsilon='5'."),
    ({"epsilon": True}, TypeError, "epsilon must be a real number, got epsilon=True."),
]
_COMMON_ERRORS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"renormalize": 1}, TypeError, "renormalize must be a bool, got renormalize=1."),
]


@dataclass
class Case:
    """How to build and check one registered mechanism."""

    variants: dict[str, dict[str, Any]]
    #: parameter overrides (on the first variant) -> exception type and exact message
    errors: list[tuple[dict[str, Any], type[Exception], str]]
    #: the epsilon the guarantee must state, from the mechanism's parameters
    expected_epsilon: Callable[[Any], float]
    #: a parameter change that must change the output law (and so the fingerprint)
    change: dict[str, Any] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "gaussian": Case(
        variants={
            "analytic": {"epsilon": 5.0, "delta": 1e-5},
            "classic": {"epsilon": 5.0, "delta": 1e-5, "calibration": "classic"},
            "clip": {"epsilon": 2.0, "delta": 1e-6, "input_norm": "clip"},
        },
        errors=[
            *_EPS_ERRORS,
            *_COMMON_ERRORS,
            ({"delta": 0}, ValueError, "delta must be > 0, got delta=0."),
            ({"delta": 1}, ValueError, "delta must be < 1, got delta=1."),
            ({"delta": 1.5}, ValueError, "delta must be < 1, got delta=1.5."),
            (
                {"calibration": "exact"},
                ValueError,
                "calibration must be one of 'analytic', 'classic', got calibration='exact'.",
            ),
            ({"sensitivity": 0}, ValueError, "sensitivity must be > 0, got sensitivity=0."),
            (
                {"input_norm": "none"},
                ValueError,
                "input_norm must be one of 'normalize', 'clip', got input_norm='none'.",
            ),
        ],
        expected_epsilon=lambda m: m.epsilon,
        change={"epsilon": 6.0},
    ),
    "empirical": Case(
        variants={"default": {"sigma": 0.2}, "clip": {"sigma": 0.5, "input_norm": "clip"}},
        errors=[
            *_COMMON_ERRORS,
            ({"sigma": 0}, ValueError, "sigma must be > 0, got sigma=0."),
            ({"sigma": -0.5}, ValueError, "sigma must be > 0, got sigma=-0.5."),
            ({"sigma": "0.2"}, TypeError, "sigma must be a real number, got sigma='0.2'."),
            (
                {"report_delta": 1.0},
                ValueError,
                "report_delta must be < 1, got report_delta=1.",
            ),
            (
                {"input_norm": "unit"},
                ValueError,
                "input_norm must be one of 'normalize', 'clip', got input_norm='unit'.",
            ),
        ],
        expected_epsilon=lambda m: theory.analytic_gaussian_epsilon(m.sigma, m.report_delta, 2.0),
        change={"sigma": 0.3},
    ),
    "laplace": Case(
        variants={
            "normalize": {"epsilon": 10.0},
            "clip": {"epsilon": 10.0, "input_norm": "clip"},
            "none": {"epsilon": 3.0, "input_norm": "none"},
        },
        errors=[
            *_EPS_ERRORS,
            *_COMMON_ERRORS,
            (
                {"input_norm": "l2"},
                ValueError,
                "input_norm must be one of 'normalize', 'clip', 'none', got input_norm='l2'.",
            ),
        ],
        expected_epsilon=lambda m: m.epsilon,
        change={"epsilon": 11.0},
    ),
    "mahalanobis": Case(
        variants={
            "identity": {"epsilon": 10.0},
            "diagonal": {"epsilon": 10.0, "covariance": _DIAG},
            "full": {"epsilon": 10.0, "covariance": _FULL, "smoothing": 0.2},
            "mask": {"epsilon": 10.0, "mask": _MASK, "mask_delta": 0.05},
        },
        errors=[
            *_EPS_ERRORS,
            *_COMMON_ERRORS,
            ({"smoothing": 1.5}, ValueError, "smoothing must be <= 1, got smoothing=1.5."),
            ({"smoothing": -0.1}, ValueError, "smoothing must be >= 0, got smoothing=-0.1."),
            ({"mask_delta": -1}, ValueError, "mask_delta must be >= 0, got mask_delta=-1."),
            (
                {"covariance": _DIAG, "mask": _MASK},
                ValueError,
                "give covariance or mask, not both.",
            ),
            ({"covariance": -_FULL}, DataError, "covariance must be positive definite."),
            (
                {"covariance": _FULL + np.triu(np.ones((D, D)), 1)},
                DataError,
                "covariance must be symmetric.",
            ),
            (
                {"covariance": np.ones((2, 2, 2))},
                DataError,
                "covariance must be (d,) or (d, d), got shape (2, 2, 2).",
            ),
            (
                {"covariance": np.r_[_DIAG[:-1], 0.0]},
                DataError,
                "covariance diagonal must be > 0 everywhere.",
            ),
            (
                {"covariance": np.r_[_DIAG[:-1], np.nan]},
                DataError,
                "covariance has NaN or inf entries.",
            ),
            ({"mask": _MASK * 2}, DataError, "mask values must be finite and in [0, 1]."),
            (
                {"mask": np.zeros(D), "mask_delta": 0.0},
                DataError,
                "mask is all zeros and mask_delta=0: the covariance would be zero.",
            ),
        ],
        expected_epsilon=lambda m: m.epsilon,
        change={"epsilon": 11.0},
    ),
    "purkayastha": Case(
        variants={"default": {"epsilon": 20.0}, "large-epsilon": {"epsilon": 1e4}},
        errors=[
            *_EPS_ERRORS,
            *_COMMON_ERRORS,
            (
                {"input_norm": "clip"},
                ValueError,
                "input_norm must be one of 'normalize', got input_norm='clip'.",
            ),
        ],
        expected_epsilon=lambda m: m.epsilon,
        change={"epsilon": 21.0},
    ),
    "subspace": Case(
        variants={
            "laplace": {"basis": _BASIS, "mean": _CENTRE, "epsilon": 10.0},
            "laplace-k2-clip": {"basis": _BASIS, "epsilon": 3.0, "k": 2, "input_norm": "clip"},
            "gaussian": {"basis": _BASIS, "epsilon": 2.0, "delta": 1e-5, "noise": "gaussian"},
            "purkayastha": {
                "basis": _BASIS,
                "mean": _CENTRE,
                "epsilon": 20.0,
                "noise": "purkayastha",
            },
            "dp-pca-basis": {
                "basis": _BASIS,
                "mean": _CENTRE,
                "epsilon": 10.0,
                "k": 4,
                "basis_epsilon": 1.0,
                "basis_delta": 1e-5,
            },
        },
        errors=[
            *_EPS_ERRORS,
            *_COMMON_ERRORS,
            (
                {"noise": "cauchy"},
                ValueError,
                "noise must be one of 'laplace', 'gaussian', 'purkayastha', got noise='cauchy'.",
            ),
            ({"k": 0}, ValueError, "k must be >= 1, got k=0."),
            ({"k": 7}, ValueError, "k must be <= 6, got k=7."),
            (
                {"basis": _BASIS * 1.01},
                DataError,
                "basis rows must be orthonormal (P P^T = I): max |P P^T - I| = 0.0201 > 1e-06.",
            ),
            (
                {"basis": np.ones(D)},
                DataError,
                "basis must be a (k, d) array of k >= 1 rows, got shape (16,).",
            ),
            (
                {"noise": "gaussian"},
                ValueError,
                "noise='gaussian' needs delta, got delta=None.",
            ),
            (
                {"delta": 1e-5},
                ValueError,
                "delta applies to noise='gaussian' only, got delta=1e-05.",
            ),
            (
                {"basis_epsilon": 1.0},
                ValueError,
                "a DP-PCA basis needs both basis_epsilon and basis_delta, got basis_epsilon=1.0, "
                "basis_delta=None.",
            ),
            (
                {"basis": {"sha256": "ab" * 32, "shape": [6, D]}},
                ValueError,
                "the subspace configuration records basis only by its SHA-256 (abababababab...); "
                "pass basis=ARRAY or the basis file.",
            ),
            (
                {"mean": np.ones(3)},
                DataError,
                f"mean must be a finite ({D},) array, got shape (3,).",
            ),
            (
                {"noise": "purkayastha", "k": 1},
                ValueError,
                "noise='purkayastha' needs k >= 2, got k=1.",
            ),
        ],
        expected_epsilon=lambda m: m.epsilon,
        change={"epsilon": 11.0},
    ),
}


def test_every_registered_mechanism_has_a_case() -> None:
    missing = sorted(set(MECHANISMS) - set(CASES) - TESTED_ELSEWHERE)
    assert not missing, (
        f"registered mechanism(s) {missing} have no contract case: add a row to CASES in "
        f"{__file__} (valid parameters, exact error messages, expected guarantee epsilon)."
    )
    stale = sorted(set(CASES) - set(MECHANISMS))
    assert not stale, f"CASES lists unregistered mechanism(s) {stale}"


def _variant_params() -> list[Any]:
    out = []
    for name in sorted(MECHANISMS):
        if name in TESTED_ELSEWHERE:
            continue
        case = CASES.get(name)
        if case is None:  # reported by test_every_registered_mechanism_has_a_case
            out.append(pytest.param(name, "?", id=f"{name}-MISSING"))
            continue
        out += [pytest.param(name, v, id=f"{name}-{v}") for v in case.variants]
    return out


def _error_params() -> list[Any]:
    out = []
    for name in sorted(CASES):
        for i, (override, exc, msg) in enumerate(CASES[name].errors):
            out.append(pytest.param(name, override, exc, msg, id=f"{name}-{i}"))
    return out


def _batch(dtype: Any, n: int = 9, seed: int = 0) -> np.ndarray:
    # rows of varied norms (some above 1, to exercise clipping), none zero
    X = np.random.default_rng(seed).standard_normal((n, D)) * np.linspace(0.2, 3.0, n)[:, None]
    return X.astype(dtype)


@pytest.mark.parametrize(("name", "override", "exc", "message"), _error_params())
def test_parameter_errors_have_exact_messages(
    name: str, override: dict[str, Any], exc: type[Exception], message: str
) -> None:
    params = {**next(iter(CASES[name].variants.values())), **override}
    with pytest.raises(exc) as info:
        MECHANISMS[name](**params)
    assert str(info.value) == message


@pytest.mark.parametrize(("name", "variant"), _variant_params())
class TestMechanismContract:
    """Behaviour every mechanism shares, whatever its noise."""

    @pytest.fixture
    def params(self, name: str, variant: str) -> dict[str, Any]:
        if name not in CASES:
            pytest.fail(f"registered mechanism {name!r} has no contract case in CASES")
        return CASES[name].variants[variant]

    @pytest.fixture
    def mech(self, name: str, params: dict[str, Any]) -> Mechanism:
        return MECHANISMS[name](**params)

    def test_constructor_is_keyword_only(self, name: str, params: dict[str, Any]) -> None:
        cls = MECHANISMS[name]
        sig = inspect.signature(cls.__init__)
        positional = [
            p.name
            for p in list(sig.parameters.values())[1:]
            if p.kind is not inspect.Parameter.KEYWORD_ONLY
        ]
        assert positional == []
        with pytest.raises(TypeError):
            cls(*params.values())

    def test_name_and_registry(self, name: str, mech: Mechanism, params: dict[str, Any]) -> None:
        assert mech.name == name
        assert mech.config["mechanism"] == name
        assert get_mechanism(name, **params).fingerprint == mech.fingerprint

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_batch_shape_and_dtype_kept(self, mech: Mechanism, dtype: Any) -> None:
        X = _batch(dtype)
        Y = mech.privatize(X, rng=0)
        assert Y.shape == (X.shape[0], mech.output_dim(D))
        assert Y.dtype == dtype
        assert np.isfinite(Y).all()

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_single_vector_shape_and_dtype_kept(self, mech: Mechanism, dtype: Any) -> None:
        x = _batch(dtype)[3]
        y = mech.privatize(x, rng=0)
        assert y.shape == (mech.output_dim(D),)
        assert y.dtype == dtype
        # a single vector is the one-row batch
        np.testing.assert_array_equal(y, mech.privatize(x[None, :], rng=0)[0])

    def test_integer_and_list_input_give_float64(self, mech: Mechanism) -> None:
        X = np.arange(1, 2 * D + 1).reshape(2, D)
        assert mech.privatize(X, rng=0).dtype == np.float64
        assert mech.privatize(X.tolist(), rng=0).dtype == np.float64

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_input_not_mutated(self, mech: Mechanism, dtype: Any) -> None:
        X = _batch(dtype)
        before = X.copy()
        X.flags.writeable = False  # any write raises
        mech.privatize(X, rng=0)
        mech.privatize(X[0], rng=0)
        np.testing.assert_array_equal(X, before)
        Xw = before.copy()  # and a writeable array is left bit-identical too
        mech.privatize(Xw, rng=1)
        np.testing.assert_array_equal(Xw, before)

    def test_call_is_privatize(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        np.testing.assert_array_equal(mech(X, rng=5), mech.privatize(X, rng=5))

    def test_same_seed_same_output(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        a = mech.privatize(X, rng=42)
        np.testing.assert_array_equal(a, mech.privatize(X, rng=42))
        np.testing.assert_array_equal(a, mech.privatize(X, rng=as_generator(42)))

    def test_generator_state_advances(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        g = as_generator(3)
        a = mech.privatize(X, rng=g)
        b = mech.privatize(X, rng=g)
        assert not np.any(np.all(a == b, axis=1))

    def test_different_seeds_different_output(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        a, b = mech.privatize(X, rng=1), mech.privatize(X, rng=2)
        assert not np.any(np.all(a == b, axis=1)), "some row got identical noise"

    def test_fresh_entropy_by_default(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        a, b = mech.privatize(X), mech.privatize(X)
        assert not np.any(np.all(a == b, axis=1))

    def test_bad_rng_rejected(self, mech: Mechanism) -> None:
        with pytest.raises(TypeError, match=re.escape("rng must be an int")):
            mech.privatize(_batch(np.float64), rng="seed")

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_renormalised_rows_have_unit_norm(
        self, name: str, params: dict[str, Any], dtype: Any
    ) -> None:
        mech = MECHANISMS[name](**{**params, "renormalize": True})
        norms = np.linalg.norm(mech.privatize(_batch(dtype), rng=0).astype(np.float64), axis=1)
        # float64: a few ulps; float32: rounding each entry to float32 moves the norm by
        # at most ~sqrt(d) * 6e-8 relative
        tol = 1e-12 if dtype == np.float64 else 1e-6
        np.testing.assert_allclose(norms, 1.0, rtol=0, atol=tol)

    def test_spans_several_blocks(self, mech: Mechanism) -> None:
        n = type(mech).block_rows + 3
        X = np.random.default_rng(8).standard_normal((n, D))
        Y = mech.privatize(X, rng=0)
        assert Y.shape == (n, mech.output_dim(D))
        assert np.isfinite(Y).all()
        np.testing.assert_array_equal(Y, mech.privatize(X, rng=0))

    @pytest.mark.parametrize(
        ("bad", "needle"),
        [(np.nan, "NaN or inf"), (np.inf, "NaN or inf"), (-np.inf, "NaN or inf")],
    )
    def test_non_finite_rows_raise(self, mech: Mechanism, bad: float, needle: str) -> None:
        X = _batch(np.float64)
        X[4, 2] = bad
        with pytest.raises(DataError, match=re.escape(needle)) as info:
            mech.privatize(X, rng=0)
        assert "row 4" in str(info.value)
        with pytest.raises(DataError, match=re.escape(needle)):
            mech.privatize(X[4], rng=0)

    @pytest.mark.parametrize(
        "scale",
        [
            0.01,
            37.0,
            1e-200,
            1e200,
        ],
    )
    def test_normalised_inputs_ignore_scale(self, mech: Mechanism, scale: float) -> None:
        """With input_norm="normalize" only the direction of a row matters, at any scale."""
        if mech.input_norm != "normalize":
            pytest.skip("only for mechanisms that normalise their inputs")
        X = _batch(np.float64)
        Y = mech.privatize(X * scale, rng=9)
        np.testing.assert_allclose(Y, mech.privatize(X, rng=9), rtol=1e-9, atol=1e-12)

    def test_zero_rows_raise(self, mech: Mechanism) -> None:
        X = _batch(np.float64)
        X[6] = 0.0
        if mech.input_norm == "none":
            # no normalisation: a zero vector is a valid point to perturb
            assert np.isfinite(mech.privatize(X, rng=0)).all()
            return
        with pytest.raises(DataError, match="all-zero row") as info:
            mech.privatize(X, rng=0)
        assert "row 6" in str(info.value)

    @pytest.mark.parametrize(
        ("X", "needle"),
        [(np.ones((2, 3, D)), "shape (n, d) or (d,)"), (np.ones((0, D)), "non-empty")],
    )
    def test_bad_shapes_raise(self, mech: Mechanism, X: np.ndarray, needle: str) -> None:
        with pytest.raises(DataError, match=re.escape(needle)):
            mech.privatize(X, rng=0)

    def test_non_numeric_rejected(self, mech: Mechanism) -> None:
        with pytest.raises(TypeError, match="real"):
            mech.privatize(np.ones((2, D), dtype=complex), rng=0)
        with pytest.raises(TypeError, match="real numeric"):
            mech.privatize(np.array([["a"] * D]), rng=0)

    def test_guarantee_matches_parameters(self, name: str, mech: Mechanism) -> None:
        g = mech.guarantee
        assert isinstance(g, Guarantee)
        assert g.is_formal
        assert math.isclose(g.epsilon, CASES[name].expected_epsilon(mech), rel_tol=1e-12)
        assert isinstance(g.describe(), str) and g.describe()
        d = g.to_dict()
        assert guarantee_from_dict(json.loads(json.dumps(d))) == g
        assert mech.guarantee == g  # a property computed from fixed parameters

    def test_config_and_fingerprint_stable(
        self, name: str, mech: Mechanism, params: dict[str, Any]
    ) -> None:
        cfg = mech.config
        assert json.loads(json.dumps(cfg)) == cfg
        assert cfg["input_norm"] == mech.input_norm
        assert cfg["renormalize"] is mech.renormalize
        fp = mech.fingerprint
        assert re.fullmatch(r"[0-9a-f]{64}", fp)
        twin = MECHANISMS[name](**params)
        assert twin.config == cfg and twin.fingerprint == fp
        mech.privatize(_batch(np.float32), rng=0)
        assert mech.fingerprint == fp and mech.config == cfg
        assert repr(mech).startswith(type(mech).__name__ + "(")

    def test_fingerprint_tracks_the_output_law(
        self, name: str, mech: Mechanism, params: dict[str, Any]
    ) -> None:
        changed = MECHANISMS[name](**{**params, **CASES[name].change})
        assert changed.fingerprint != mech.fingerprint
        flipped = MECHANISMS[name](**{**params, "renormalize": not mech.renormalize})
        assert flipped.fingerprint != mech.fingerprint


# ---- the fingerprint covers every constructor parameter, by construction --------------------

#: one valid configuration per registered mechanism (and a second for Mahalanobis' covariance)
_FP_BASES: dict[str, list[dict[str, Any]]] = {
    "gaussian": [{"epsilon": 5.0, "delta": 1e-5}],
    "empirical": [{"sigma": 0.2}],
    "laplace": [{"epsilon": 10.0}],
    "mahalanobis": [{"epsilon": 10.0, "mask": _MASK}, {"epsilon": 10.0, "covariance": _DIAG}],
    "purkayastha": [{"epsilon": 20.0}],
    "projection": [{"k": 4, "epsilon": 2.0, "delta": 1e-5}],
    "subspace": [
        {"basis": _BASIS, "mean": _CENTRE, "epsilon": 10.0, "k": 4},
        {
            "basis": _BASIS,
            "epsilon": 2.0,
            "delta": 1e-5,
            "noise": "gaussian",
            "k": 3,
            "basis_epsilon": 1.0,
            "basis_delta": 1e-5,
            "basis_noise_multiplier": 3.0,
        },
    ],
}


def _alternatives(cls: type[Mechanism], name: str, value: Any) -> list[Any]:
    """Candidate other values for one constructor parameter (the first valid one is used)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int) and name in ("k", "projection_seed", "input_dim"):
        return [value + 1, value - 1] if value is not None else [D]
    if isinstance(value, float):
        return [v for v in (value * 1.5, value * 0.5, value + 0.25, 0.5, 0.25) if v != value]
    if isinstance(value, np.ndarray) and name == "basis":
        return [value[::-1].copy()]  # other orthonormal rows
    if isinstance(value, np.ndarray):
        other = value.copy()
        other[0] = other[0] + 0.25 if other[0] <= 0.5 else other[0] - 0.25
        return [other]
    if value is None:
        return {
            "covariance": [_DIAG],
            "mask": [_MASK],
            "input_dim": [D],
            "delta": [1e-6],
            "basis_epsilon": [1.0],
            "basis_delta": [1e-6],
        }.get(name, [])
    if isinstance(value, str):
        choices = {
            "calibration": ["analytic", "classic"],
            "input_norm": list(cls.allowed_input_norms),
            "kind": ["gaussian", "sparse", "srht"],
            "neighbouring": ["record", "attribute"],
            "noise": ["laplace", "gaussian", "purkayastha"],
        }.get(name, [])
        return [c for c in choices if c != value]
    return []


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_keyword_changes_the_fingerprint(name: str) -> None:
    """Changing any constructor keyword changes the fingerprint (and so the keyed noise and the
    ledger's configuration) -- except the documented law-independent ones, which must leave the
    output unchanged. A mechanism with a parameter this test cannot vary fails loudly."""
    cls = MECHANISMS[name]
    assert name in _FP_BASES, f"add a base configuration for {name!r} to _FP_BASES"
    X = np.random.default_rng(0).standard_normal((6, D))
    covered: set[str] = set()
    for base in _FP_BASES[name]:
        mech = cls(**base)
        fp = mech.fingerprint
        for param, value in mech.params.items():
            if param in ("covariance", "mask") and ({"covariance", "mask"} & set(base)) - {param}:
                continue  # the other of the two is given: they are exclusive
            for alt in _alternatives(cls, param, value):
                try:
                    other = cls(**{**base, param: alt})
                except (TypeError, ValueError):
                    continue
                if param in cls.law_independent_params:
                    assert other.fingerprint == fp, param
                    np.testing.assert_array_equal(
                        other.privatize(X, rng=1), mech.privatize(X, rng=1), err_msg=param
                    )
                else:
                    assert other.fingerprint != fp, (name, param, value, alt)
                covered.add(param)
                break
    if len(cls.allowed_input_norms) == 1:
        covered.add("input_norm")  # nothing to vary: only one value is valid
    missing = set(cls.parameter_names()) - covered
    assert not missing, f"{name}: no valid alternative tried for {sorted(missing)}"
