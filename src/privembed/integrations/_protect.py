"""One batch in, one protected batch out -- the step every integration shares.

:class:`BatchProtector` applies a mechanism to a batch exactly as ``privembed protect`` does:
the same input checks (with row numbers relative to the whole file), keyed noise from
:func:`privembed.keyed.record_tags` when a key is given (so the output of a record does not
depend on how records are batched, sharded or partitioned), one shared generator otherwise, and
the input dtype kept. Vector stores, the streaming command, the local and Ray shard engines and
the framework wrappers all go through it, so a record protected by any of them under the same key
and mechanism is bit-identical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError, check_embeddings
from ..mechanisms.base import GeneratorSource, Mechanism, NoiseSource
from ..rng import as_generator

__all__ = ["PROTECTION_KEYS", "BatchProtector", "protection_metadata", "text_ids"]

#: the entries of file metadata that describe a protection (see :func:`protection_metadata`)
PROTECTION_KEYS = (
    "protected",
    "privembed_version",
    "mechanism",
    "guarantee",
    "guarantee_text",
    "randomness",
    "key_id",
    "projection",
    "previous_protection",
)


def text_ids(texts: Sequence[str]) -> list[str]:
    """Record ids for texts: ``"sha256:<hex>"`` of the UTF-8 text.

    Keyed noise needs a record id; for texts without one, the digest of the text is the id, so
    the same text always gets the same protected vector and different texts independent noise.

    Examples
    --------
    >>> text_ids(["a"])[0][:15]
    'sha256:ca978112'
    """
    return ["sha256:" + hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]


def row_ids(X: NDArray[Any]) -> list[str]:
    """Record ids for vectors without ids: the SHA-256 of each row as little-endian float64."""
    rows = np.ascontiguousarray(np.asarray(X, dtype="<f8"))
    return ["row-sha256:" + hashlib.sha256(r.tobytes()).hexdigest() for r in rows]


def protection_metadata(
    mechanism: Mechanism,
    *,
    key_id: str | None = None,
    seeded: bool = False,
    dim: int | None = None,
) -> dict[str, Any]:
    """The metadata ``privembed protect`` writes next to protected embeddings.

    With ``dim`` (the input dimension), a projection's public matrix is described too.
    """
    from .. import __version__

    out: dict[str, Any] = {
        "protected": True,
        "privembed_version": __version__,
        "mechanism": mechanism.config,
        "guarantee": mechanism.guarantee.to_dict(),
        "guarantee_text": mechanism.guarantee.describe(),
        "randomness": (
            f"keyed (key id {key_id})"
            if key_id
            else "seeded (reproducible, experiments only)"
            if seeded
            else "fresh OS entropy"
        ),
    }
    if key_id:
        out["key_id"] = key_id
    describe = getattr(mechanism, "projection_metadata", None)
    if describe is not None and dim is not None and dim > 0:
        out["projection"] = describe(dim)
    return out


class BatchProtector:
    """Protect batches of embeddings with one mechanism, keyed or from one generator.

    Parameters
    ----------
    mechanism : Mechanism
    key : bytes, optional
        Secret key for keyed noise (:mod:`privembed.keyed`); every call then needs ``ids``.
    rng : int, numpy.random.Generator or None
        Randomness without a key (not allowed together with ``key``). One generator is created
        here and advanced by every call. ``None`` (fresh OS entropy) protectors can be pickled
        to other processes (each copy draws new entropy); seeded ones refuse, because every copy
        would repeat the same noise.
    generator : {"philox", "aes"}
        Counter-based generator behind keyed noise.
    name : str
        Name used in error messages (e.g. the input file's name).

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> p = BatchProtector(get_mechanism("gaussian", epsilon=5.0, delta=1e-5), key=b"k" * 32)
    >>> X = np.eye(3, dtype=np.float32)
    >>> Y = p(X, ids=["a", "b", "c"])
    >>> Y.dtype, bool(np.array_equal(p(X[1:], ids=["b", "c"]), Y[1:]))
    (dtype('float32'), True)
    """

    def __init__(
        self,
        mechanism: Mechanism,
        *,
        key: bytes | None = None,
        rng: Any = None,
        generator: str = "philox",
        name: str = "X",
    ) -> None:
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be a Mechanism, got mechanism={mechanism!r}.")
        if key is not None and rng is not None:
            raise ValueError("give rng or key, not both (keyed noise is deterministic).")
        self._key_id: str | None = None
        if key is not None:
            from ..keyed import key_id

            self._key_id = key_id(key)  # validates the key's type and length
            key = bytes(key)
        self.mechanism = mechanism
        self.key = key
        self.generator = generator
        self.name = name
        self._fresh = key is None and rng is None
        self._source: NoiseSource | None = (
            None if key is not None else GeneratorSource(as_generator(rng))
        )
        self._fingerprint = mechanism.fingerprint

    # ---- pickling (Ray workers, multiprocessing) ---------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        if self.key is None and not self._fresh:
            raise TypeError(
                "a seeded BatchProtector cannot be sent to other processes: every copy would "
                "repeat the same noise; use key= (keyed noise) or rng=None there."
            )
        state = dict(self.__dict__)
        state["_source"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.key is None:
            self._source = GeneratorSource(as_generator(None))

    # ---- protection ------------------------------------------------------------------------
    @property
    def keyed(self) -> bool:
        return self.key is not None

    @property
    def key_id(self) -> str | None:
        """Public id of the key (``None`` without a key)."""
        return self._key_id

    def metadata(self, *, seeded: bool = False, dim: int | None = None) -> dict[str, Any]:
        """:func:`protection_metadata` for this protector."""
        return protection_metadata(self.mechanism, key_id=self.key_id, seeded=seeded, dim=dim)

    def __call__(
        self, X: Any, ids: Sequence[Any] | None = None, *, row_offset: int = 0
    ) -> NDArray[Any]:
        """Protect one (n, d) batch; returns (n, output_dim) in the input's float dtype.

        Raises
        ------
        privembed.DataError
            NaN/inf or zero rows (numbered from ``row_offset``), missing or duplicate ids with
            a key, wrong dimension for the mechanism.
        """
        mech = self.mechanism
        arr, _ = check_embeddings(
            X, name=self.name, row_offset=row_offset, allow_zero=mech.input_norm == "none"
        )
        mech._check_dim(arr.shape[1])
        if self.key is not None:
            if ids is None:
                raise DataError(
                    f"{self.name}: keyed noise needs record ids (the noise is derived per id)."
                )
            id_list = list(ids)
            if len(id_list) != arr.shape[0]:
                raise DataError(
                    f"{self.name}: ids has {len(id_list)} entries but there are "
                    f"{arr.shape[0]} rows."
                )
            if len(set(id_list)) != len(id_list):
                raise DataError(f"{self.name}: record ids must be unique for keyed noise.")
            from ..keyed import KeyedSource, record_tags

            source: NoiseSource = KeyedSource(
                record_tags(self.key, self._fingerprint, id_list), generator=self.generator
            )
        else:
            assert self._source is not None
            source = self._source
        return mech.privatize_block(arr, source).astype(arr.dtype, copy=False)
