"""Shared input checks: one message format (name the parameter, echo the value)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import DataError
from privembed.core._validation import check_choice, check_embeddings, check_int, check_real


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"gt": 0}, -1, "epsilon must be > 0, got epsilon=-1."),
        ({"gt": 0}, -1.0, "epsilon must be > 0, got epsilon=-1."),
        ({"gt": 0}, 0, "epsilon must be > 0, got epsilon=0."),
        ({"ge": 0}, -0.5, "epsilon must be >= 0, got epsilon=-0.5."),
        ({"lt": 1}, 1, "epsilon must be < 1, got epsilon=1."),
        ({"le": 1}, 1.25, "epsilon must be <= 1, got epsilon=1.25."),
        ({"gt": 0.5}, 0.25, "epsilon must be > 0.5, got epsilon=0.25."),
        ({}, math.nan, "epsilon must be finite, got epsilon=nan."),
        ({}, -math.inf, "epsilon must be finite, got epsilon=-inf."),
    ],
)
def test_check_real_range_messages(kwargs, value, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_real("epsilon", value, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("value", [True, "1", None, [1.0], 1 + 2j])
def test_check_real_type_messages(value) -> None:
    with pytest.raises(TypeError) as info:
        check_real("epsilon", value, gt=0)
    assert str(info.value) == f"epsilon must be a real number, got epsilon={value!r}."


def test_check_real_returns_float() -> None:
    for v in (2, np.float32(2.0), np.int64(2), 2.0):
        out = check_real("x", v, gt=0, le=2)
        assert out == 2.0 and type(out) is float
    assert check_real("x", 0.0, ge=0, lt=1) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "value", "exc", "message"),
    [
        ({"ge": 1}, 0, ValueError, "k must be >= 1, got k=0."),
        ({"le": 10}, 11, ValueError, "k must be <= 10, got k=11."),
        ({}, 3.0, TypeError, "k must be an integer, got k=3.0."),
        ({}, True, TypeError, "k must be an integer, got k=True."),
        ({}, "3", TypeError, "k must be an integer, got k='3'."),
    ],
)
def test_check_int_messages(kwargs, value, exc, message: str) -> None:
    with pytest.raises(exc) as info:
        check_int("k", value, **kwargs)
    assert str(info.value) == message


def test_check_int_accepts_numpy_integers() -> None:
    out = check_int("k", np.int64(5), ge=1)
    assert out == 5 and type(out) is int


def test_check_choice() -> None:
    assert check_choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError) as info:
        check_choice("mode", "c", ("a", "b"))
    assert str(info.value) == "mode must be one of 'a', 'b', got mode='c'."


def test_data_error_is_a_value_error() -> None:
    assert issubclass(DataError, ValueError)


class TestCheckEmbeddings:
    def test_batch_and_single(self) -> None:
        X = np.ones((3, 4))
        arr, single = check_embeddings(X)
        assert arr.shape == (3, 4) and not single and arr.dtype == np.float64
        arr, single = check_embeddings(np.ones(4, dtype=np.float32))
        assert arr.shape == (1, 4) and single and arr.dtype == np.float32

    @pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
    def test_other_real_dtypes_become_float64(self, dtype) -> None:
        arr, _ = check_embeddings(np.ones((2, 3), dtype=dtype))
        assert arr.dtype == np.float64

    def test_float16_is_kept(self) -> None:
        arr, _ = check_embeddings(np.ones((2, 3), dtype=np.float16))
        assert arr.dtype == np.float16

    def test_lists_are_accepted(self) -> None:
        arr, single = check_embeddings([[1.0, 2.0], [3.0, 4.0]])
        assert arr.shape == (2, 2) and not single

    def test_complex_and_text_rejected(self) -> None:
        with pytest.raises(TypeError) as info:
            check_embeddings(np.ones((2, 2), dtype=complex))
        assert str(info.value) == "X must be real-valued, got dtype=complex128."
        with pytest.raises(TypeError) as info:
            check_embeddings(np.array([["a", "b"]]))
        assert str(info.value) == "X must be a real numeric array, got dtype=<U1."

    @pytest.mark.parametrize(
        ("X", "message"),
        [
            (np.ones((2, 2, 2)), "X must have shape (n, d) or (d,), got shape (2, 2, 2)."),
            (np.ones((0, 3)), "X must be non-empty, got shape (0, 3)."),
            (np.ones((3, 0)), "X must be non-empty, got shape (3, 0)."),
            (np.float64(1.0), "X must have shape (n, d) or (d,), got shape ()."),
        ],
    )
    def test_bad_shapes(self, X, message: str) -> None:
        with pytest.raises(DataError) as info:
            check_embeddings(X)
        assert str(info.value) == message

    def test_non_finite_rows_named(self) -> None:
        X = np.ones((5, 3))
        X[1, 0] = np.nan
        X[3, 2] = np.inf
        with pytest.raises(DataError) as info:
            check_embeddings(X, name="queries")
        assert str(info.value) == "queries has 2 row(s) with NaN or inf values (first: row 1)."
        with pytest.raises(DataError) as info:
            check_embeddings(X, row_offset=100)
        assert "(first: row 101)" in str(info.value)

    def test_zero_rows(self) -> None:
        X = np.ones((4, 3))
        X[2] = 0.0
        with pytest.raises(DataError) as info:
            check_embeddings(X)
        assert str(info.value) == (
            "X has 1 all-zero row(s) (first: row 2); a zero vector has no direction to protect."
        )
        arr, _ = check_embeddings(X, allow_zero=True)
        assert arr.shape == (4, 3)

    def test_dimension_mismatch(self) -> None:
        with pytest.raises(DataError) as info:
            check_embeddings(np.ones((2, 3)), dim=4)
        assert str(info.value) == "X has dimension 3 but 4 is required (dimension mismatch)."

    def test_input_untouched(self) -> None:
        X = np.arange(12.0).reshape(3, 4) + 1
        before = X.copy()
        X.flags.writeable = False
        check_embeddings(X)
        np.testing.assert_array_equal(X, before)
