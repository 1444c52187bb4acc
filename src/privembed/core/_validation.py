"""Input checks shared by every module, with one message format.

Every message names the parameter and echoes the value, e.g.
``"epsilon must be > 0, got epsilon=-1."``. Type problems raise :class:`TypeError`,
range problems :class:`ValueError`; bad data (NaN rows, wrong dimension) raise
:class:`DataError`, a :class:`ValueError` subclass the CLI turns into a one-line error.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DataError",
    "check_bool",
    "check_choice",
    "check_embeddings",
    "check_int",
    "check_keywords",
    "check_optional_int",
    "check_real",
    "check_training",
]


class DataError(ValueError):
    """Invalid input data (shape, dtype, non-finite or zero rows, dimension mismatch)."""


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return repr(int(value)) if not isinstance(value, bool) else repr(value)
    return repr(value)


def check_real(
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> float:
    """Validate a real scalar parameter and return it as ``float``.

    Examples
    --------
    >>> check_real("epsilon", 2, gt=0)
    2.0
    >>> check_real("epsilon", -1, gt=0)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be > 0, got epsilon=-1.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}.")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{name} must be finite, got {name}={_fmt(value)}.")
    bounds = (
        (gt, lambda: v > gt, ">"),  # type: ignore[operator]
        (ge, lambda: v >= ge, ">="),  # type: ignore[operator]
        (lt, lambda: v < lt, "<"),  # type: ignore[operator]
        (le, lambda: v <= le, "<="),  # type: ignore[operator]
    )
    for bound, ok, op in bounds:
        if bound is not None and not ok():
            raise ValueError(f"{name} must be {op} {_fmt(bound)}, got {name}={_fmt(value)}.")
    return v


def check_noise_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """``epsilon > 0`` whose noise scale ``1/epsilon`` (and ``d/epsilon``) is finite.

    Examples
    --------
    >>> check_noise_epsilon(1e-320)
    Traceback (most recent call last):
    ...
    ValueError: epsilon=1e-320 is too small: the noise scale 1/epsilon is not a finite number.
    """
    eps = check_real(name, epsilon, gt=0)
    if not math.isfinite(1e6 / eps):
        raise ValueError(
            f"{name}={eps!r} is too small: the noise scale 1/{name} is not a finite number."
        )
    return eps


def check_int(name: str, value: Any, *, ge: int | None = None, le: int | None = None) -> int:
    """Validate an integer parameter.

    Examples
    --------
    >>> check_int("k", 0, ge=1)
    Traceback (most recent call last):
    ...
    ValueError: k must be >= 1, got k=0.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {name}={value!r}.")
    v = int(value)
    if ge is not None and v < ge:
        raise ValueError(f"{name} must be >= {ge}, got {name}={v}.")
    if le is not None and v > le:
        raise ValueError(f"{name} must be <= {le}, got {name}={v}.")
    return v


def check_optional_int(
    name: str, value: Any, *, ge: int | None = None, le: int | None = None
) -> int | None:
    """:func:`check_int` for a parameter that may be ``None`` (which passes as it is)."""
    return None if value is None else check_int(name, value, ge=ge, le=le)


def check_bool(name: str, value: Any) -> bool:
    """Validate a flag: a bool, never a truthy stand-in such as ``1`` or ``"no"``.

    Examples
    --------
    >>> check_bool("standardize", "no")
    Traceback (most recent call last):
    ...
    TypeError: standardize must be a bool, got standardize='no'.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {name}={value!r}.")
    return value


def check_keywords(where: str, given: Any, group: Any) -> None:
    """Refuse keywords as Python refuses them in a signature, for a function that takes a
    parameter group as ``**kwargs: Unpack[group]`` (a ``TypedDict``): the type checker checks
    the names, nothing does at run time -- a misspelt keyword would be dropped silently.

    Examples
    --------
    >>> from typing import TypedDict
    >>> class Draw(TypedDict, total=False):
    ...     rng: int
    >>> check_keywords("draw", {"rgn": 0}, Draw)
    Traceback (most recent call last):
    ...
    TypeError: draw() got an unexpected keyword argument 'rgn'
    """
    allowed = group.__required_keys__ | group.__optional_keys__
    for name in given:
        if name not in allowed:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
    # in declaration order, as Python lists them
    missing = [
        repr(k) for k in group.__annotations__ if k in group.__required_keys__ - given.keys()
    ]
    if missing:
        last = " and " if len(missing) == 2 else ", and "
        names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + last + missing[-1]
        s = "s" if len(missing) > 1 else ""
        raise TypeError(
            f"{where}() missing {len(missing)} required keyword-only argument{s}: {names}"
        )


def check_training(
    epochs: Any, batch_size: Any, lr: Any, num_threads: Any
) -> tuple[int, int, float, int | None]:
    """The settings of a minibatch training loop, checked alike wherever privembed trains a
    model: ``epochs`` >= 1, ``batch_size`` >= 1, ``lr`` > 0 and ``num_threads`` (torch's
    intra-op threads while training) >= 1 or ``None``."""
    return (
        check_int("epochs", epochs, ge=1),
        check_int("batch_size", batch_size, ge=1),
        check_real("lr", lr, gt=0),
        check_optional_int("num_threads", num_threads, ge=1),
    )


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Validate a string option.

    Examples
    --------
    >>> check_choice("calibration", "exact", ("analytic", "classic"))
    Traceback (most recent call last):
    ...
    ValueError: calibration must be one of 'analytic', 'classic', got calibration='exact'.
    """
    if value not in choices:
        opts = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {opts}, got {name}={value!r}.")
    return str(value)


def check_embeddings(
    X: Any,
    *,
    name: str = "X",
    dim: int | None = None,
    allow_zero: bool = False,
    row_offset: int = 0,
    check_values: bool = True,
) -> tuple[NDArray[np.floating[Any]], bool]:
    """Validate an embedding batch.

    Parameters
    ----------
    X : array_like, shape (n, d) or (d,)
        Float16, float32 or float64 embeddings (kept as they are; other real dtypes are
        converted to float64).
    dim : int, optional
        Required dimension ``d``.
    allow_zero : bool
        Whether all-zero rows are acceptable (they are not for mechanisms that normalise).
    row_offset : int
        Added to row numbers in messages (for batches of a larger file).
    check_values : bool
        Check for NaN/inf and zero rows (callers that validate per block pass False).

    Returns
    -------
    X2 : ndarray, shape (n, d)
        A 2-D view (never a copy the caller could mutate through).
    single : bool
        True if the input was a single vector.

    Raises
    ------
    DataError
        Wrong number of dimensions, empty batch, NaN/inf entries, zero rows, wrong ``d``.
    """
    if isinstance(X, np.ndarray) and X.dtype.kind == "c":
        raise TypeError(f"{name} must be real-valued, got dtype={X.dtype}.")
    arr = np.asarray(X)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a real numeric array, got dtype={arr.dtype}.")
    if arr.dtype not in (np.float16, np.float32, np.float64):
        arr = arr.astype(np.float64)
    single = arr.ndim == 1
    if single:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise DataError(f"{name} must have shape (n, d) or (d,), got shape {arr.shape}.")
    n, d = arr.shape
    if n == 0 or d == 0:
        raise DataError(f"{name} must be non-empty, got shape {arr.shape}.")
    if dim is not None and d != dim:
        raise DataError(f"{name} has dimension {d} but {dim} is required (dimension mismatch).")
    if not check_values:
        return arr, single
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise DataError(
            f"{name} has {bad.size} row(s) with NaN or inf values (first: row {int(bad[0]) + row_offset})."
        )
    if not allow_zero:
        zero = ~np.any(arr != 0, axis=1)
        if zero.any():
            bad = np.flatnonzero(zero)
            raise DataError(
                f"{name} has {bad.size} all-zero row(s) (first: row {int(bad[0]) + row_offset}); "
                "a zero vector has no direction to protect."
            )
    return arr, single
