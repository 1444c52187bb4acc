"""The :class:`Release`: one release of protected embeddings, batch by batch -- randomness
(fresh, seeded or keyed), typed record ids, the ledger staged before anything is published --
and :func:`protect`, the one-call form for an in-memory batch."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_keywords
from ..core.cancel import checkpoint
from ..core.rng import (
    CounterSource,
    GeneratorSource,
    NoiseSource,
    expect_counter_rows,
    seed_stream_key,
)
from ..keys.keyed import key_id as _key_id
from ..keys.keyed import (
    keyed_source,
    record_tags,
    release_context,
    resolve_key,
    tag_commitments,
    vector_tags,
)
from ..keys.ledger import Ledger, StagedRelease
from ..mechanisms.base import Mechanism
from .identity import AliasFold, is_content_id, refuse_variants
from .ids import ReleasedIds, typed_keys
from .policy import charge_text, check_randomness, default_keyed_generator
from .setting import SettingNote, setting_note


@dataclass
class ReleaseSummary:
    """What a finished release did."""

    rows: int = 0
    dim_in: int | None = None
    dim_out: int | None = None
    fresh: int | None = None
    free: int | None = None
    ledger_batch: str | None = None
    destination: str | None = None
    guarantee: str = ""
    charge: str = ""
    randomness: str = ""
    notes: list[str] = field(default_factory=list)
    #: what the setting does to vectors of this dimension and what is wrong with it
    #: (:func:`privembed.release.setting.setting_note`), set by the file and store front ends
    setting: SettingNote | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["setting"] = None if self.setting is None else self.setting.to_dict()
        return out


class ReleaseOptions(TypedDict, total=False):
    """The randomness, ledger and context of a release: keywords of :class:`Release`, which
    :func:`protect` passes on as they are (all optional; :class:`Release` says what each
    means)."""

    key: Any
    rng: Any
    generator: str | None
    ledger: Ledger | None
    subject: str | None
    model: str | None


class Release:
    """One release of protected embeddings, batch by batch.

    Parameters
    ----------
    mechanism : Mechanism
    key : bytes or path, optional
        Secret key (or key file) for keyed noise; not with ``rng``.
    rng : int, numpy.random.Generator or None
        Without a key: ``None`` fresh OS entropy, an int or Generator reproducible noise.
    generator : {"philox", "aes"}, optional
        Counter-based generator of keyed noise (default: AES when the randomness policy is a
        CSPRNG, else Philox).
    ledger : Ledger, optional
        Stage the records and commit them (:meth:`commit`) before publishing.
    subject : str, optional
        The subject (user, client) the release is charged to in the ledger.
    model : str, optional
        Id of the embedding model that produced the inputs (part of the keyed context).
    destination : str, optional
        Where the output goes (recorded in the ledger).
    require_ids : bool
        Refuse batches without ids even without a key or ledger.
    name : str
        Input name for messages.

    Examples
    --------
    >>> from privembed import LaplaceMechanism
    >>> X = np.eye(3, dtype=np.float32)
    >>> with Release(LaplaceMechanism(epsilon=20.0), key=b"k" * 32) as r:
    ...     Y = r.protect(X, ids=["a", "b", "c"])
    >>> with Release(LaplaceMechanism(epsilon=20.0), key=b"k" * 32) as r:
    ...     Y2 = r.protect(X[1:], ids=["b", "c"])       # same content, same ids: identical
    >>> Y.dtype, bool(np.array_equal(Y2, Y[1:]))
    (dtype('float32'), True)
    """

    def __init__(
        self,
        mechanism: Mechanism,
        *,
        destination: str | None = None,
        require_ids: bool = False,
        name: str = "X",
        **options: Unpack[ReleaseOptions],
    ) -> None:
        check_keywords("Release.__init__", options, ReleaseOptions)
        key, rng, ledger = options.get("key"), options.get("rng"), options.get("ledger")
        subject = options.get("subject")
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be a Mechanism, got mechanism={mechanism!r}.")
        check_randomness(
            key, rng, ledger=ledger, key_name="a key", rng_name="a seed", ledger_name="a ledger"
        )
        self.mechanism = mechanism
        self.key = None if key is None else resolve_key(key)
        self.key_id = None if self.key is None else _key_id(self.key)
        self.generator = options.get("generator") or default_keyed_generator()
        if self.generator not in ("philox", "aes"):
            raise ValueError(
                f"generator must be one of 'philox', 'aes', got generator={self.generator!r}."
            )
        self.model = options.get("model")
        self.name = name
        self.ledger = ledger
        self.subject = subject
        self.seeded = key is None and rng is not None
        self._stream_key = seed_stream_key(rng) if self.seeded else None
        self._root = np.random.SeedSequence() if key is None and rng is None else None
        self.needs_ids = self.key is not None or ledger is not None or require_ids
        self.staged: StagedRelease | None = None
        if ledger is not None:
            self.staged = ledger.stage(
                mechanism, key_id=self.key_id, subject=subject, destination=destination
            )
        self._ids = ReleasedIds() if self.key is not None and ledger is None else None
        self._fold: AliasFold | None = None
        self.summary = ReleaseSummary(
            destination=destination,
            guarantee=mechanism.guarantee.describe(),
            charge=charge_text(mechanism, None if self.staged is None else self.staged.cost),
            randomness=self.randomness,
        )
        self.dim: int | None = None
        self._committed = False
        self._published = False
        self._fingerprint = mechanism.fingerprint

    # ---- description -----------------------------------------------------------------------
    @property
    def keyed(self) -> bool:
        return self.key is not None

    @property
    def randomness(self) -> str:
        if self.key_id:
            return f"keyed (key id {self.key_id}, {self.generator})"
        if self.seeded:
            return "seeded (reproducible, experiments only)"
        return "fresh OS entropy"

    def metadata(self, dim: int | None = None) -> dict[str, Any]:
        """The protection metadata written next to the output (``privembed info`` shows it)."""
        from .. import __version__

        m = self.mechanism
        out: dict[str, Any] = {
            "protected": True,
            "privembed_version": __version__,
            "mechanism": m.config,
            "guarantee": m.guarantee.to_dict(),
            "guarantee_text": m.guarantee.describe(),
            "randomness": self.randomness,
        }
        if self.key_id:
            out["key_id"] = self.key_id
            out["keyed_generator"] = self.generator
        d = dim if dim is not None else self.dim
        if d is not None:
            out.update(m.release_metadata(d))
        return out

    # ---- batches ---------------------------------------------------------------------------
    def _typed_keys(self, ids: Sequence[Any], n: int) -> list[str]:
        keys = typed_keys(ids, where=self.name, first_row=self.summary.rows)
        if len(keys) != n:
            raise DataError(f"{self.name}: ids has {len(keys)} entries but there are {n} rows.")
        return keys

    def fold(self, X: Any, ids: Sequence[Any]) -> list[Any]:
        """The record each row of a batch is released as: its id, except that an id derived
        from the content (``"cid:..."``, :func:`privembed.release.content_ids`) in a keyed
        release with a ledger becomes the record the ledger's clean-vector aliases name --
        rows with bit-identical clean vectors are one record across commands
        (:mod:`privembed.release.identity`). Call it before :meth:`protect` and release, write
        and store the rows under the ids it returns.

        The aliases this batch claims are committed with the release, in its transaction;
        a refused release records none. Rows of the batch that are one record are refused,
        named (:class:`~privembed.keys.ledger.DuplicateIds`): a record is released once per
        release.

        Parameters
        ----------
        X : array_like, shape (n, d)
            The batch's clean vectors (as :meth:`protect` will take them).
        ids : sequence, length n

        Returns
        -------
        list
            The ids to release the rows under.
        """
        id_list = list(ids)
        if self.staged is None or self.key is None or not any(map(is_content_id, id_list)):
            return id_list
        arr, _ = check_embeddings(X, name=self.name, allow_zero=True, check_values=False)
        if arr.ndim != 2 or arr.shape[0] != len(id_list):
            raise DataError(
                f"{self.name}: ids has {len(id_list)} entries but there are "
                f"{arr.shape[0] if arr.ndim == 2 else 1} rows."
            )
        if self._fold is None:
            assert self.ledger is not None
            self._fold = AliasFold(self.key, self.ledger)
        owners, tags, claimants = self._fold.owners(arr, id_list)
        refuse_variants(owners, where=self.name, first_row=self.summary.rows)
        self.staged.claim_aliases(tags, claimants, keep_if_refused=False)
        return owners

    def protect(
        self,
        X: Any,
        ids: Sequence[Any] | None = None,
        *,
        digests: Sequence[bytes] | None = None,
        row_offset: int | None = None,
        subjects: Sequence[Any] | None = None,
    ) -> NDArray[Any]:
        """Protect one (n, d) batch of this release; returns (n, output_dim) in X's float dtype.

        Parameters
        ----------
        X : array_like, shape (n, d)
        ids : sequence, length n, optional
            Record ids (required with a key or ledger).
        digests : sequence of bytes, optional
            Content digests (keyed noise); default: :func:`privembed.keys.keyed.vector_digests` of
            ``X``. Text front ends pass :func:`privembed.keys.keyed.text_digests`.
        row_offset : int, optional
            Absolute number of the batch's first row (default: rows released so far).
        subjects : sequence, length n, optional
            Per record, the subject (a patient, a user) it is charged to in the ledger, whose
            per-subject budget bounds every release of all its records together (default: the
            release's ``subject``). Needs a ledger.

        Raises
        ------
        privembed.DataError
            Bad rows, missing or duplicate ids, a dimension that differs from earlier batches.
        """
        if self._committed:
            raise RuntimeError("this release was already committed; start a new Release.")
        m = self.mechanism
        arr, _ = check_embeddings(
            X, name=self.name, allow_zero=m.input_norm == "none", check_values=False
        )
        n, d = arr.shape
        if self.dim is None:
            m.check_dim(d)
            self.dim = d
        elif d != self.dim:
            raise DataError(
                f"{self.name}: batch has dimension {d} but earlier rows have {self.dim} "
                "(dimension mismatch)."
            )
        offset = (
            self.summary.rows if row_offset is None else check_int("row_offset", row_offset, ge=0)
        )
        subj = None if subjects is None else self._subjects(subjects, n, offset)
        keys: list[str] | None = None
        if ids is not None:
            keys = self._typed_keys(ids, n)
        elif self.needs_ids:
            raise DataError(
                f"{self.name}: keyed noise and the ledger need record ids (line numbers are not "
                "ids: another file's line 5 is another record); give an id column (--id-field) "
                "or derive ids from the content (--ids-from-content)."
            )
        tags: list[bytes] | None = [b""] * n if self.key is not None else None
        source_for = self._sources(arr, keys, digests, offset, tags)
        Y = m.privatize_rows(arr, source_for, name=self.name, row_offset=offset)
        # ids are taken only once the batch is drawn: a batch refused for its rows (NaN, zero)
        # can be corrected and given again; a duplicate id still publishes nothing
        if self._ids is not None and keys is not None:
            self._ids.add(keys)
        if self.staged is not None:
            assert keys is not None
            commits = None if tags is None else tag_commitments(tags)
            outs = _row_digests(Y)
            self.staged.add(keys, tags=commits, output_digests=outs, subjects=subj)
        self.summary.rows += n
        self.summary.dim_in = d
        self.summary.dim_out = Y.shape[1]
        checkpoint("batch.drawn")
        return Y

    def _sources(
        self,
        arr: NDArray[Any],
        keys: list[str] | None,
        digests: Sequence[bytes] | None,
        offset: int,
        tags: list[bytes] | None,
    ) -> Callable[[int, int], NoiseSource]:
        """``source_for(start, stop)``: the noise of rows ``start:stop`` of this batch -- keyed
        (filling ``tags`` block by block, in the sampling threads), seeded per row, or fresh."""
        if self.key is not None:
            assert keys is not None and tags is not None
            tag_rows = self._tagger(arr, keys, digests)
            key, gen = self.key, self.generator

            def keyed(start: int, stop: int) -> NoiseSource:
                # the tags' hashing holds the GIL; in the block's thread it overlaps with the
                # other threads' compiled draws, which do not
                t = tag_rows(start, stop)
                tags[start:stop] = t
                return keyed_source(key, t, generator=gen)

            return keyed
        if self._stream_key is not None:
            sk = self._stream_key

            def seeded(start: int, stop: int) -> NoiseSource:
                return CounterSource(sk, CounterSource.row_ids(offset + start, stop - start))

            return seeded
        assert self._root is not None
        entropy = self._root.entropy
        from ..core.rng import _from_seedseq

        def fresh(start: int, stop: int) -> NoiseSource:
            child = np.random.SeedSequence(entropy, spawn_key=(offset + start,))
            return GeneratorSource(_from_seedseq(child))

        return fresh

    def _subjects(self, subjects: Sequence[Any], n: int, offset: int) -> list[str]:
        """Per-record subjects, checked: one per row, non-empty strings or ints (as text)."""
        if self.staged is None:
            raise ValueError("subjects are charged in the ledger: give a ledger (--ledger).")
        out = list(subjects)
        if len(out) != n:
            raise DataError(f"{self.name}: subjects has {len(out)} entries but there are {n} rows.")
        for i, s in enumerate(out):
            ok = isinstance(s, str | np.str_) and str(s).strip() != ""
            ok = ok or (isinstance(s, int | np.integer) and not isinstance(s, bool | np.bool_))
            if not ok:
                raise DataError(
                    f"{self.name}: row {offset + i} has no subject ({s!r}); every record of a "
                    "release charged per subject needs one (a non-empty string or an integer)."
                )
        return [str(s) for s in out]

    def _tagger(
        self, arr: NDArray[Any], keys: list[str], digests: Sequence[bytes] | None
    ) -> Callable[[int, int], list[bytes]]:
        """``tags(start, stop)``: the keyed tags of rows ``start:stop`` of this batch."""
        assert self.key is not None
        key = self.key
        n, d = arr.shape
        ctx = release_context(
            self._fingerprint, model=self.model, input_dim=d, generator=self.generator
        )
        typed = [k.encode("utf-8", errors="surrogateescape") for k in keys]
        if digests is None:
            return lambda a, b: vector_tags(key, ctx, typed[a:b], arr[a:b])
        if len(digests) != n:
            raise ValueError(f"digests has {len(digests)} entries but there are {n} rows.")
        return lambda a, b: record_tags(key, ctx, typed[a:b], digests[a:b])

    def _tags(
        self, arr: NDArray[Any], keys: list[str], digests: Sequence[bytes] | None
    ) -> list[bytes]:
        return self._tagger(arr, keys, digests)(0, arr.shape[0])

    def account(
        self, X: Any, ids: Sequence[Any], *, digests: Sequence[bytes] | None = None
    ) -> None:
        """Stage records whose noise other processes draw (the shard and Ray engines: workers
        hold a copy of this release without its ledger; the driver accounts the same rows)."""
        if self.staged is None:
            raise ValueError("account() needs a release with a ledger.")
        arr, _ = check_embeddings(X, name=self.name, allow_zero=True, check_values=False)
        if self.dim is None:
            self.mechanism.check_dim(arr.shape[1])
            self.dim = arr.shape[1]
        keys = self._typed_keys(ids, arr.shape[0])
        commits = None
        if self.key is not None:
            commits = tag_commitments(self._tags(arr, keys, digests))
        self.staged.add(keys, tags=commits)
        self.summary.rows += arr.shape[0]

    # ---- other processes -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        if self.seeded:
            raise TypeError(
                "a seeded release cannot be sent to other processes: every copy would repeat "
                "the same noise; use a key (keyed noise) or fresh noise there."
            )
        if self.ledger is not None:
            raise TypeError(
                "a release with a ledger stays in its process; send a copy without the ledger "
                "to workers and account their rows with account()."
            )
        state = dict(self.__dict__)
        state["_ids"] = None
        state["_root"] = None
        state["_fold"] = None  # the variant fold holds the ledger
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.key is None:
            self._root = np.random.SeedSequence()  # each copy draws its own fresh entropy
        else:
            self._ids = ReleasedIds()

    def worker_copy(self) -> Release:
        """A copy without the ledger, for workers that draw the noise of this release."""
        other = object.__new__(Release)
        state = dict(self.__dict__)
        state.update(ledger=None, staged=None, _ids=None, _fold=None, needs_ids=self.keyed)
        other.__dict__.update(state)
        if self.key is not None:
            other._ids = ReleasedIds()
        return other

    def expect_rows(self, n: int) -> None:
        """Hint that this release will draw about ``n`` rows (a file's row count): keyed and
        seeded noise load the compiled per-record kernels (:mod:`privembed.core._jit`) up front when
        that many rows pay for them, instead of after the first 200,000. Output is unchanged."""
        if (self.key is not None and self.generator == "philox") or self._stream_key is not None:
            expect_counter_rows(n)

    def note_setting(self) -> SettingNote | None:
        """Put the setting note (:func:`~privembed.release.setting.setting_note`) for this
        release's input dimension in its summary and return it (None below dimension 2)."""
        if self.dim is not None and self.dim >= 2:
            self.summary.setting = setting_note(self.mechanism, self.dim)
        return self.summary.setting

    # ---- finishing ---------------------------------------------------------------------------
    def commit(self, *, published: bool = False) -> ReleaseSummary:
        """Record the release in the ledger (budgets checked); call before publishing.

        ``published=True``: the caller hands the output over at once (the server), so the
        ledger records it as published in the same transaction (one write instead of two).
        """
        if self._committed:
            return self.summary
        if self.staged is not None:
            self.staged.commit(published=published)
            self._published = published
            self.summary.fresh = self.staged.fresh
            self.summary.free = self.staged.count - self.staged.fresh
            self.summary.ledger_batch = self.staged.batch
        self._committed = True
        return self.summary

    def mark_published(self) -> None:
        """Note in the ledger that the committed output was published (once)."""
        if self.staged is not None and self.staged.committed and not self._published:
            self.staged.mark_published()
        self._published = True

    def close(self) -> None:
        """Forget staged records that were not committed; release resources."""
        if self.staged is not None and not self.staged.committed:
            self.staged.discard()
        if self._ids is not None:
            self._ids.close()
            self._ids = None

    def __enter__(self) -> Release:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        try:
            if exc_type is None:
                self.commit()
                self.mark_published()
        finally:
            self.close()


def _row_digests(Y: NDArray[Any]) -> list[str]:
    """Hex SHA-256 (128 bits) of every output row's bytes, as the ledger records them."""
    Yc = np.ascontiguousarray(Y)
    if Yc.shape[0] == 0:
        return []
    width = Yc.shape[1] * Yc.itemsize
    mv = Yc.data.cast("B")
    sha = hashlib.sha256
    return [sha(mv[i * width : (i + 1) * width]).hexdigest()[:32] for i in range(Yc.shape[0])]


def protect(
    X: Any,
    mechanism: Mechanism,
    *,
    ids: Sequence[Any] | None = None,
    **options: Unpack[ReleaseOptions],
) -> NDArray[Any]:
    """Protect an in-memory batch as one release (ledger committed before returning).

    ``options``: :class:`ReleaseOptions` (``key``, ``rng``, ``generator``, ``ledger``,
    ``subject``, ``model``), as for :class:`Release`.

    Examples
    --------
    >>> from privembed import GaussianMechanism
    >>> Y = protect(np.eye(4), GaussianMechanism(epsilon=5.0, delta=1e-5), rng=0)
    >>> Y.shape
    (4, 4)
    """
    check_keywords("protect", options, ReleaseOptions)
    arr, single = check_embeddings(X, allow_zero=True, check_values=False)
    if single and ids is not None and (isinstance(ids, str | bytes) or np.ndim(ids) == 0):
        ids = [ids]
    with Release(mechanism, **options) as rel:
        Y = rel.protect(arr, ids)
    return Y[0] if single else Y
