"""The shared Mechanism base: validation, input normalisation, dtype, batching and randomness.

A concrete mechanism implements only :meth:`Mechanism._perturb`, which receives a float64
block of (already normalised) inputs and a :class:`NoiseSource`, and returns the noisy block.
Everything else -- checking the batch, normalising or clipping inputs, processing in bounded
blocks, renormalising, restoring the dtype, never mutating the input -- lives here, once.

Noise is drawn only through the :class:`NoiseSource` interface. The default source wraps a
:class:`numpy.random.Generator` (see :mod:`privembed.rng`); keyed sources give every record its
own deterministic stream, so a mechanism does not know (or need to know) which one it gets.
"""

from __future__ import annotations

import abc
import hashlib
import json
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError, check_choice, check_embeddings
from ..accounting import Guarantee
from ..rng import as_generator

__all__ = ["GeneratorSource", "Mechanism", "NoiseSource", "row_norms", "unit_rows"]

INPUT_NORMS = ("normalize", "clip", "none")


def row_norms(X: NDArray[np.float64]) -> NDArray[np.float64]:
    """l2 norm of each row, exact at any scale (no overflow for 1e200, no underflow for 1e-200).

    The fast path is ``sqrt(sum(x**2))``; rows whose squares over- or underflow (norm outside
    [1e-140, 1e140]) are recomputed after scaling by their largest absolute entry.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    bad = ~((norms > 1e-140) & (norms < 1e140))
    if bad.any():
        sub = X[bad]
        m = np.max(np.abs(sub), axis=1, keepdims=True)
        m = np.where(m > 0, m, 1.0)
        scaled = sub / m
        norms[bad] = m[:, 0] * np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    return norms


def unit_rows(X: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rows scaled to unit l2 norm (float64; rows must be non-zero), robust to extreme scales."""
    return X / row_norms(X)[:, None]


def _norms_from_sumsq(X: NDArray[np.float64], sumsq: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row norms from precomputed sums of squares, recomputed exactly where they over/underflow."""
    norms = np.sqrt(sumsq)
    if not np.all((norms > 1e-140) & (norms < 1e140)):
        norms = row_norms(X)
    return norms


class NoiseSource(abc.ABC):
    """Row-aligned random draws for a block of ``n`` records.

    Row ``i`` of every draw belongs to record ``i``. Sources are used for exactly one block, in a
    fixed call sequence determined by the mechanism's configuration.
    """

    @abc.abstractmethod
    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        """Standard normal draws, shape (n, k)."""

    @abc.abstractmethod
    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        """Uniform [0, 1) draws, shape (n, k)."""

    @abc.abstractmethod
    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        """Gamma(shape, scale=1) draws, shape (n,)."""


class GeneratorSource(NoiseSource):
    """A :class:`NoiseSource` backed by one :class:`numpy.random.Generator` (bulk draws)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        return self.rng.standard_normal((n, k))

    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        return self.rng.random((n, k))

    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        return self.rng.standard_gamma(shape, size=n)


class Mechanism(abc.ABC):
    """Base class of every vector mechanism.

    Subclasses set ``name``, validate parameters in a keyword-only ``__init__``, and implement
    :meth:`_perturb`, :attr:`guarantee` and :meth:`_params`.

    Attributes
    ----------
    input_norm : {"normalize", "clip", "none"}
        What happens to inputs before noise: scaled to unit length, clipped into the unit ball,
        or used as they are. Sensitivity-based guarantees assume one of the first two.
    renormalize : bool
        Scale outputs back to unit length (post-processing, so the guarantee is unchanged).
    """

    name: ClassVar[str] = "mechanism"
    #: input normalisations a mechanism accepts (its guarantee depends on them)
    allowed_input_norms: ClassVar[tuple[str, ...]] = INPUT_NORMS
    #: rows processed per block (float64 temporaries stay in cache; part of the sampling order)
    block_rows: ClassVar[int] = 1024
    #: outputs are unit vectors by construction (renormalisation is skipped)
    unit_outputs: ClassVar[bool] = False

    input_norm: str
    renormalize: bool

    def _init_common(self, input_norm: str, renormalize: bool) -> None:
        self.input_norm = check_choice("input_norm", input_norm, self.allowed_input_norms)
        if not isinstance(renormalize, bool):
            raise TypeError(f"renormalize must be a bool, got renormalize={renormalize!r}.")
        self.renormalize = renormalize

    # ---- what subclasses provide -----------------------------------------------------------
    @property
    @abc.abstractmethod
    def guarantee(self) -> Guarantee:
        """The privacy guarantee of one release, computed from the actual parameters."""

    @abc.abstractmethod
    def _params(self) -> dict[str, Any]:
        """JSON-serialisable parameters that determine the output law."""

    @abc.abstractmethod
    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Noisy version of a float64 block ``X`` (already normalised per ``input_norm``)."""

    def output_dim(self, d: int) -> int:
        """Dimension of the released vectors for input dimension ``d``."""
        return d

    def _check_dim(self, d: int) -> None:  # noqa: B027 - optional hook
        """Raise DataError if the mechanism cannot take inputs of dimension ``d``."""

    # ---- shared behaviour ------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """Mechanism name and every parameter that determines the output law (JSON-safe)."""
        return {
            "mechanism": self.name,
            **self._params(),
            "input_norm": self.input_norm,
            "renormalize": self.renormalize,
        }

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical configuration: same fingerprint <=> same output law."""
        blob = json.dumps(self.config, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({params})"

    def _prepare(self, X64: NDArray[np.float64], sumsq: NDArray[np.float64]) -> NDArray[np.float64]:
        """Normalise a float64 block *in place* per ``input_norm`` (``X64`` is our own copy)."""
        if self.input_norm == "none":
            return X64
        norms = _norms_from_sumsq(X64, sumsq)
        if self.input_norm == "clip":
            norms = np.maximum(norms, 1.0)
        X64 /= norms[:, None]
        return X64

    def prepare_inputs(self, X: NDArray[Any]) -> NDArray[np.float64]:
        """Float64 copy of a 2-D ``X``, normalised or clipped as the mechanism does before noise."""
        X64 = np.array(X, dtype=np.float64)
        return self._prepare(X64, np.einsum("ij,ij->i", X64, X64))

    def _finish_block(
        self, X64: NDArray[np.float64], sumsq: NDArray[np.float64], source: NoiseSource
    ) -> NDArray[np.float64]:
        Y = self._perturb(self._prepare(X64, sumsq), source)
        if self.renormalize and not self.unit_outputs:
            norms = np.sqrt(np.einsum("ij,ij->i", Y, Y))
            if not np.all((norms > 1e-140) & (norms < 1e140)):
                norms = row_norms(Y)
            norms[norms == 0] = 1.0
            Y /= norms[:, None]
        return Y

    def privatize_block(self, X: NDArray[Any], source: NoiseSource) -> NDArray[np.float64]:
        """Perturb one validated 2-D block with an explicit :class:`NoiseSource` (float64 out).

        ``X`` is not modified. Used by keyed releases and by engines that manage their own
        sources.
        """
        X64 = np.array(X, dtype=np.float64)
        return self._finish_block(X64, np.einsum("ij,ij->i", X64, X64), source)

    def privatize(
        self,
        X: Any,
        *,
        rng: Any = None,
        ids: Any = None,
        key: bytes | None = None,
        generator: str = "philox",
    ) -> NDArray[Any]:
        """Release protected embeddings.

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
            Embeddings (float32 or float64). Never modified.
        rng : int, numpy.random.Generator or None
            Randomness (see :mod:`privembed.rng`); ``None`` draws fresh OS entropy. Not allowed
            together with ``key``.
        ids : sequence of int or str, length n, optional
            Record ids (required with ``key``; must be unique).
        key : bytes, optional
            Secret key for keyed noise (:mod:`privembed.keyed`): the noise of each record is a
            deterministic function of (key, :attr:`fingerprint`, id), so re-releasing a record
            returns the identical vector.
        generator : {"philox", "aes"}
            Counter-based generator behind keyed noise.

        Returns
        -------
        Y : ndarray, shape (n, output_dim(d)) or (output_dim(d),)
            Protected embeddings, same dtype as ``X`` (float64 for non-float input).

        Raises
        ------
        privembed.DataError
            NaN/inf or all-zero rows, wrong number of dimensions, bad or duplicate ids.
        """
        allow_zero = self.input_norm == "none"
        arr, single = check_embeddings(X, allow_zero=allow_zero, check_values=False)
        self._check_dim(arr.shape[1])
        id_list = self._check_ids(ids, arr.shape[0], single) if ids is not None else None
        if key is not None:
            if rng is not None:
                raise ValueError("give rng or key, not both (keyed noise is deterministic).")
            if id_list is None:
                raise ValueError("ids are required with key (the noise is derived per record id).")
        out = np.empty((arr.shape[0], self.output_dim(arr.shape[1])), dtype=arr.dtype)
        source: NoiseSource | None = None if key is not None else GeneratorSource(as_generator(rng))
        for start in range(0, arr.shape[0], self.block_rows):
            stop = min(start + self.block_rows, arr.shape[0])
            if key is not None:
                from ..keyed import KeyedSource, record_tags

                assert id_list is not None
                tags = record_tags(key, self.fingerprint, id_list[start:stop])
                block_source: NoiseSource = KeyedSource(tags, generator=generator)
            else:
                assert source is not None
                block_source = source
            X64 = np.array(arr[start:stop], dtype=np.float64)
            sumsq = np.einsum("ij,ij->i", X64, X64)
            # one pass validates and feeds the normalisation: NaN/inf rows give a non-finite
            # sum, zero rows a zero sum; the exact check (and its message) runs only when flagged
            if not (np.isfinite(sumsq).all() and (allow_zero or sumsq.all())):
                check_embeddings(X64, allow_zero=allow_zero, row_offset=start)
            out[start:stop] = self._finish_block(X64, sumsq, block_source)
        return out[0] if single else out

    @staticmethod
    def _check_ids(ids: Any, n: int, single: bool) -> list[Any]:
        id_list = (
            [ids] if single and (isinstance(ids, str | bytes) or np.ndim(ids) == 0) else list(ids)
        )
        if len(id_list) != n:
            raise DataError(f"ids has {len(id_list)} entries but X has {n} rows.")
        if len(set(id_list)) != n:
            raise DataError("ids must be unique (equal ids would get identical keyed noise).")
        return id_list

    __call__ = privatize
