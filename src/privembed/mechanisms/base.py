"""The shared Mechanism base: parameters, validation, input normalisation, dtype, blocks, threads.

A concrete mechanism implements only :meth:`Mechanism._perturb`, which receives a float64
block of (already normalised) inputs and a :class:`~privembed.core.rng.NoiseSource`, and returns
the noisy block, plus its :attr:`~Mechanism.guarantee`. Everything else -- recording the
constructor's parameters (so the configuration and its fingerprint cover every keyword by
construction), checking the batch, normalising or clipping inputs, processing in bounded
blocks on several threads, renormalising, checking the output is finite, restoring the dtype,
never mutating the input -- lives here, once.

Randomness
----------
:meth:`Mechanism.privatize` takes ``rng`` as everywhere in privembed:

* ``None`` -- fresh OS entropy. Rows are processed in blocks of :attr:`block_rows`, each block
  with its own generator spawned from one fresh seed (bulk draws; blocks run in parallel).
* an int or a :class:`numpy.random.Generator` -- reproducible noise. Each *row* draws from its
  own counter-based stream identified by (seed, absolute row number)
  (:class:`~privembed.core.rng.CounterSource`), so a seeded result is identical whatever the
  thread count, block size, or the batches a file is streamed in (pass ``row_offset`` for a
  batch that starts inside a larger array).

Keyed noise (a record's noise bound to a secret key, the configuration, its id and content)
is not chosen here: :mod:`privembed.release` builds keyed sources and calls
:meth:`Mechanism.privatize_rows`. A mechanism is the pure sampler: :meth:`Mechanism.privatize`
draws noise and returns it, and records nothing -- no ids, no ledger, no published file. The
one release path, which does, is :class:`privembed.release.Release`.
"""

from __future__ import annotations

import abc
import enum
import functools
import hashlib
import inspect
import json
import numbers
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_embeddings, check_int
from ..core.accounting import Guarantee
from ..core.rng import CounterSource, GeneratorSource, NoiseSource, seed_stream_key

__all__ = [
    "GeneratorSource",
    "Mechanism",
    "NoiseSource",
    "canonical_params",
    "get_num_threads",
    "row_norms",
    "set_num_threads",
    "unit_rows",
]

INPUT_NORMS = ("normalize", "clip", "none")
#: 1-D array parameters up to this length are written into :attr:`Mechanism.config` in full
#: (so the configuration rebuilds the mechanism); larger ones by their SHA-256 only.
INLINE_ARRAY_MAX = 8192

_threads = max(
    1, min(int(os.environ.get("PRIVEMBED_NUM_THREADS", "0") or 0) or (os.cpu_count() or 1), 64)
)
_pool: ThreadPoolExecutor | None = None


def set_num_threads(n: int) -> None:
    """Threads used to sample large batches (default: ``PRIVEMBED_NUM_THREADS`` or all cores).

    Seeded and keyed outputs do not depend on this number; fresh noise is equal in law.
    """
    global _threads, _pool
    _threads = check_int("n", n, ge=1, le=256)
    if _pool is not None:
        _pool.shutdown(wait=False)
        _pool = None


def get_num_threads() -> int:
    """The number of sampling threads in force."""
    return _threads


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="privembed-sample")
    return _pool


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


# ---------------------------------------------------------------------------------------------
# parameters by construction
# ---------------------------------------------------------------------------------------------


def _array_digest(arr: NDArray[Any]) -> dict[str, Any]:
    a = np.ascontiguousarray(arr, dtype="<f8")
    h = hashlib.sha256(repr(a.shape).encode() + b"\x00" + a.tobytes()).hexdigest()
    return {"sha256": h, "shape": list(a.shape)}


def _is_digest(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == {"sha256", "shape"}


def _json_value(name: str, v: Any, *, inline: bool) -> Any:
    """JSON-safe canonical form of one parameter value (arrays inline or by digest)."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if _is_digest(v):
        return dict(v)
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"parameter {name} has a value that cannot be recorded in a configuration: {v!r}."
        ) from None
    if inline and arr.ndim == 1 and arr.size <= INLINE_ARRAY_MAX:
        return arr.tolist()
    return _array_digest(arr)


def canonical_params(params: dict[str, Any], *, inline: bool) -> dict[str, Any]:
    """Parameters in canonical JSON-safe form (``inline=False``: every array by its digest)."""
    return {k: _json_value(k, v, inline=inline) for k, v in params.items()}


class Mechanism(abc.ABC):
    """Base class of every vector mechanism.

    Subclasses set ``name``, validate parameters in a keyword-only ``__init__`` (storing each
    validated parameter as an attribute of the same name where it has one), and implement
    :meth:`_perturb` and :attr:`guarantee`. The constructor's arguments are recorded by the
    base class, so :attr:`params`, :attr:`config` and :attr:`fingerprint` cover every keyword
    without a hand-written list.

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
    #: rows processed per block (float64 temporaries stay in cache; the unit of threading)
    block_rows: ClassVar[int] = 1024
    #: outputs are unit vectors by construction (renormalisation is skipped)
    unit_outputs: ClassVar[bool] = False
    #: constructor parameters that take arrays (given as arrays, lists, or file paths)
    array_params: ClassVar[tuple[str, ...]] = ()
    #: constructor parameters that do not change the output law (left out of the fingerprint;
    #: a contract test checks the output is identical whatever their value)
    law_independent_params: ClassVar[tuple[str, ...]] = ()
    #: whether :meth:`public_transform` exists (the public part of the release, e.g. a JL map)
    has_public_transform: ClassVar[bool] = False
    #: the constructor parameter that sets the output dimension (``None``: output = input)
    output_dim_param: ClassVar[str | None] = None
    #: the parameter that trades privacy for utility: what sweeps vary and ``advise`` searches
    privacy_parameter: ClassVar[str] = "epsilon"

    input_norm: str
    renormalize: bool
    _init_params: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        sig = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self: Mechanism, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if type(self).__init__ is recording_init:  # the outermost constructor records
                bound = sig.bind(self, *args, **kw)
                bound.apply_defaults()
                params = {
                    k: (v.copy() if isinstance(v, np.ndarray) else v)
                    for k, v in bound.arguments.items()
                    if k != "self"
                }
                for k in params:
                    attr = inspect.getattr_static(type(self), k, None)
                    if attr is None and k in self.__dict__:
                        params[k] = self.__dict__[k]  # the validated value, if stored
                self._init_params = params

        cls.__init__ = recording_init  # type: ignore[method-assign,assignment]

    @classmethod
    def parameter_names(cls) -> tuple[str, ...]:
        """Names of the keyword parameters of the constructor, in order."""
        sig = inspect.signature(cls.__init__)
        return tuple(
            n for n, p in sig.parameters.items() if n != "self" and p.kind is p.KEYWORD_ONLY
        )

    @classmethod
    def needs(cls, parameter: str) -> bool:
        """Whether the constructor requires ``parameter`` (e.g. ``delta`` for an (epsilon,
        delta) guarantee): front ends supply a default or ask for it from this, not a list
        of mechanism names."""
        return parameter in cls.required_parameters()

    @classmethod
    def required_parameters(cls) -> tuple[str, ...]:
        """Constructor parameters without a default."""
        sig = inspect.signature(cls.__init__)
        return tuple(
            n
            for n, p in sig.parameters.items()
            if n != "self" and p.kind is p.KEYWORD_ONLY and p.default is p.empty
        )

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
    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Noisy version of a float64 block ``X`` (already normalised per ``input_norm``)."""

    def output_dim(self, d: int) -> int:
        """Dimension of the released vectors for input dimension ``d``."""
        return d

    def check_dim(self, d: int) -> None:  # noqa: B027 - optional hook
        """Raise :class:`~privembed.DataError` if inputs of dimension ``d`` cannot be taken.

        Pure: it never changes the mechanism (no state depends on the call history).
        """

    def public_transform(self, X: Any) -> NDArray[np.floating[Any]]:
        """The public, noise-free part of a release applied to ``X`` (e.g. a JL projection).

        What a party holding clean vectors applies to compare them with releases. Only for
        mechanisms with :attr:`has_public_transform`.
        """
        raise NotImplementedError(f"{self.name} has no public transform.")

    def release_metadata(self, d: int) -> dict[str, Any]:
        """Extra public facts about a release at input dimension ``d`` (file metadata)."""
        return {}

    @property
    def public_transform_key(self) -> Any:
        """What identifies :meth:`public_transform` (equal keys: the same public map), or None."""
        return None

    def expected_cosine(self, d: int) -> float | None:
        """E[cos] between a unit input's release and its clean (public-transformed) vector at
        input dimension ``d``, where a closed form exists; ``None`` otherwise."""
        return None

    # ---- configuration ---------------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """Every constructor parameter with its (validated) value, arrays as arrays."""
        return dict(self._init_params)

    @property
    def config(self) -> dict[str, Any]:
        """Mechanism name and every constructor parameter, JSON-safe.

        1-D arrays (masks, diagonal covariances) are written in full, so
        ``build_mechanism(**config)`` rebuilds an identical mechanism; larger arrays appear by
        SHA-256 and must be passed again (the digest is checked).
        """
        return {"mechanism": self.name, **canonical_params(self._init_params, inline=True)}

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical configuration: same fingerprint <=> same output law."""
        params = {
            k: v for k, v in self._init_params.items() if k not in self.law_independent_params
        }
        canon = {"mechanism": self.name, **canonical_params(params, inline=False)}
        blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def __repr__(self) -> str:
        shown = []
        for k, v in canonical_params(self._init_params, inline=False).items():
            sig = inspect.signature(type(self).__init__).parameters.get(k)
            if sig is not None and sig.default is not inspect.Parameter.empty:
                default = sig.default
                if v == _json_value(k, default, inline=False):
                    continue
            shown.append(f"{k}={'<array ' + v['sha256'][:8] + '>' if _is_digest(v) else repr(v)}")
        return f"{type(self).__name__}({', '.join(shown)})"

    # ---- blocks ----------------------------------------------------------------------------
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
        if not np.isfinite(Y).all():
            raise DataError(
                f"{self!r} produced non-finite output: its noise scale overflows (is epsilon "
                "too small?); nothing was released."
            )
        return Y

    def privatize_block(self, X: NDArray[Any], source: NoiseSource) -> NDArray[np.float64]:
        """Perturb one validated 2-D block with an explicit :class:`NoiseSource` (float64 out).

        ``X`` is not modified.
        """
        X64 = np.array(X, dtype=np.float64)
        return self._finish_block(X64, np.einsum("ij,ij->i", X64, X64), source)

    def privatize_rows(
        self,
        X: Any,
        source_for: Callable[[int, int], NoiseSource],
        *,
        name: str = "X",
        row_offset: int = 0,
        threads: int | None = None,
    ) -> NDArray[Any]:
        """Validate and perturb a 2-D batch block by block; ``source_for(start, stop)`` gives
        the noise source of rows ``start:stop`` (relative to ``X``).

        Blocks run on up to ``threads`` threads (default :func:`get_num_threads`); the output
        keeps the float dtype of ``X`` (float64 for integer input).

        Raises
        ------
        privembed.DataError
            NaN/inf or zero rows (numbered from ``row_offset``), a dimension the mechanism
            cannot take, non-finite output.
        """
        allow_zero = self.input_norm == "none"
        arr, _ = check_embeddings(X, name=name, allow_zero=allow_zero, check_values=False)
        if arr.ndim != 2:
            raise DataError(f"{name} must be 2-D (n, d), got shape {arr.shape}.")
        self.check_dim(arr.shape[1])
        n = arr.shape[0]
        out = np.empty((n, self.output_dim(arr.shape[1])), dtype=arr.dtype)

        def block(start: int) -> None:
            stop = min(start + self.block_rows, n)
            X64 = np.array(arr[start:stop], dtype=np.float64)
            sumsq = np.einsum("ij,ij->i", X64, X64)
            # one pass validates and feeds the normalisation: NaN/inf rows give a non-finite
            # sum, zero rows a zero sum; the exact check (and its message) runs only when flagged
            if not (np.isfinite(sumsq).all() and (allow_zero or sumsq.all())):
                check_embeddings(
                    X64, name=name, allow_zero=allow_zero, row_offset=row_offset + start
                )
            out[start:stop] = self._finish_block(X64, sumsq, source_for(start, stop))

        starts = range(0, n, self.block_rows)
        workers = min(threads or _threads, len(starts))
        if workers <= 1:
            for s in starts:
                block(s)
        else:
            for fut in [_executor().submit(block, s) for s in starts]:
                fut.result()
        return out

    def privatize(self, X: Any, *, rng: Any = None, row_offset: int = 0) -> NDArray[Any]:
        """Protected embeddings from fresh or seeded noise: the pure sampler (nothing is recorded
        in a ledger and no id is checked; releases go through :class:`privembed.release.Release`).

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
            Embeddings (float32 or float64). Never modified.
        rng : int, numpy.random.Generator or None
            ``None`` draws fresh OS entropy; an int or a Generator gives reproducible noise in
            which each row has its own stream (see the module docstring).
        row_offset : int
            Absolute number of the first row (seeded noise of a batch cut from a larger array
            equals that of the same rows in the whole array).

        Returns
        -------
        Y : ndarray, shape (n, output_dim(d)) or (output_dim(d),)
            Protected embeddings, same float dtype as ``X`` (float64 for non-float input).

        Raises
        ------
        privembed.DataError
            NaN/inf or all-zero rows, wrong number of dimensions, non-finite output.
        """
        arr, single = check_embeddings(X, allow_zero=self.input_norm == "none", check_values=False)
        source_for = self.sources(rng, row_offset=row_offset)
        out = self.privatize_rows(arr, source_for, row_offset=row_offset)
        return out[0] if single else out

    @staticmethod
    def sources(rng: Any, *, row_offset: int = 0) -> Callable[[int, int], NoiseSource]:
        """The block-source factory :meth:`privatize` uses for ``rng`` (see the module docs)."""
        if rng is None:
            root = np.random.SeedSequence()
            from ..core.rng import _from_seedseq

            def fresh(start: int, stop: int) -> NoiseSource:
                child = np.random.SeedSequence(root.entropy, spawn_key=(start,))
                return GeneratorSource(_from_seedseq(child))

            return fresh
        row_offset = check_int("row_offset", row_offset, ge=0)
        key = seed_stream_key(rng)

        def seeded(start: int, stop: int) -> NoiseSource:
            return CounterSource(key, CounterSource.row_ids(row_offset + start, stop - start))

        return seeded

    __call__ = privatize
