"""Pre-noise steps handed to a release (a concept eraser): checked by what they can do, never
loaded here -- ``concepts/`` sits above the release in docs/architecture.md."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings


def check_eraser(eraser: Any) -> Any:
    """The pre-noise step as given: an object with ``dim``, ``transform(X, renormalize=)`` and
    the LEACE attributes recorded in the output (a :class:`privembed.concepts.ConceptEraser`).

    The release takes the step itself and reads no concept files (``concepts/`` sits above it in
    docs/architecture.md): the caller loads one, e.g. with
    :func:`privembed.concepts.load_eraser`.
    """
    if eraser is None:
        return None
    needed = ("dim", "transform", "proj_left", "proj_right", "bias", "rank", "metadata")
    if isinstance(eraser, str | Path) or not all(hasattr(eraser, a) for a in needed):
        what = (
            f"a path {str(eraser)!r}" if isinstance(eraser, str | Path) else type(eraser).__name__
        )
        raise TypeError(
            "eraser must be a pre-noise step such as privembed.concepts.ConceptEraser (load a "
            f"file with privembed.concepts.load_eraser(path)), got {what}."
        )
    return eraser


def erasure_metadata(erase: Any) -> dict[str, Any]:
    """What the output records of the erasure: its concept and method, rank and a digest."""
    h = hashlib.sha256()
    for a in (erase.proj_left, erase.proj_right, erase.bias):
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    meta = {
        k: v for k, v in erase.metadata.items() if k in ("concept", "method", "embedding_model")
    }
    return {
        **meta,
        "rank": erase.rank,
        "digest": h.hexdigest()[:16],
        "note": "LEACE erasure before the noise: no privacy guarantee of its own",
    }


def erased(erase: Any, X: Any, name: str, start: int) -> NDArray[Any]:
    """``X`` with the concept removed (renormalized), checked against the eraser's dimension."""
    # the input is checked as given (erasing a zero or NaN row would hide it)
    arr, _ = check_embeddings(X, name=name, row_offset=start)
    if arr.ndim != 2 or arr.shape[1] != erase.dim:
        raise DataError(
            f"{name}: the eraser is for dimension {erase.dim}, the embeddings have "
            f"{arr.shape[-1]} (rows from {start})."
        )
    return np.asarray(erase.transform(arr, renormalize=True), dtype=arr.dtype)
