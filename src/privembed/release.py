"""The one release path: (inputs, ids, mechanism, key, ledger, destination) -> a published release.

Every front end -- ``privembed protect``, ``protect-stream``, ``index``, the shard and Ray
engines, the sklearn / sentence-transformers / LangChain wrappers and the server -- turns
embeddings into a release through :class:`Release`, so the rules below are written once:

* **Randomness.** Fresh OS entropy (default), a seed (experiments; each row has its own stream,
  so the result does not depend on batching or threads), or *keyed* noise: a record's noise is
  a function of (secret key, configuration, embedding model, input dimension, bit generator,
  typed record id, **content digest**) -- see :mod:`privembed.keyed`. Re-releasing the same
  content returns the identical vector; changed content under the same id gets independent
  noise and is charged as a new release of that id.
* **Ids.** Keyed noise and the ledger need real record ids, typed canonically (``1`` and
  ``"1"`` differ; ``numpy.int64(1)`` and ``1`` do not). Line numbers are not ids: a release
  without ids is refused (or the ids are derived from the content on request). Duplicate ids
  in one release are refused, across batches too, in bounded memory.
* **Ledger before publish.** The records of a release are staged while the output is
  computed; :meth:`Release.commit` checks the budgets and records the release; only then is
  the output published (:func:`protect_file` renames the finished file inside the commit
  hook of :func:`privembed.io.atomic_output`, with SIGINT/SIGTERM held).
* **Checks.** Inputs are validated per block (NaN/inf/zero rows, dimension), outputs are
  checked finite before anything is published, the input dtype is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import DataError, check_embeddings, check_int
from .accounting import MetricDP, PureDP, cost_of
from .cancel import checkpoint, cooperative
from .keyed import (
    content_ids as _keyed_content_ids,
)
from .keyed import (
    key_id as _key_id,
)
from .keyed import (
    keyed_source,
    record_tags,
    release_context,
    resolve_key,
    tag_commitments,
    text_digests,
    vector_tags,
)
from .ledger import (
    DuplicateIds,
    Ledger,
    StagedRelease,
    display_key,
    ledger_for_command,
    record_key,
)
from .mechanisms.base import Mechanism
from .rng import (
    CounterSource,
    GeneratorSource,
    NoiseSource,
    bit_generator_name,
    expect_counter_rows,
    seed_stream_key,
)

__all__ = [
    "PROTECTION_KEYS",
    "Release",
    "ReleaseSummary",
    "ReleasedIds",
    "charge_text",
    "check_randomness",
    "content_ids",
    "open_ledger",
    "protect",
    "protect_file",
    "refuse_protected",
    "release_metadata",
]

#: the entries of file metadata that describe a protection
PROTECTION_KEYS = (
    "protected",
    "privembed_version",
    "mechanism",
    "guarantee",
    "guarantee_text",
    "randomness",
    "key_id",
    "keyed_generator",
    "projection",
    "previous_protection",
)

#: bit generators of :mod:`privembed.rng` that are cryptographic: keyed noise then uses AES
_CSPRNGS = ("aes", "chacha")


def default_keyed_generator() -> str:
    """``"aes"`` when the randomness policy is a CSPRNG (:func:`privembed.rng.set_bit_generator`),
    else ``"philox"``: the CSPRNG choice reaches keyed noise too."""
    return "aes" if bit_generator_name() in _CSPRNGS else "philox"


def content_ids(*, key: Any, texts: Sequence[str] | None = None, X: Any = None) -> list[str]:
    """Record ids derived from content, for inputs that carry none (explicit opt-in).

    Keyed (:func:`privembed.keyed.content_ids`): ``"cid:"`` and 128 bits of an HMAC of the
    canonical text, or of the canonical float32 row, under the release key. Equal contents get
    equal ids (and, keyed, identical releases); without the key the ids say nothing about the
    content. There is no unkeyed form: a plain digest of a text published as its id lets
    whoever holds the store and candidate texts confirm each one exactly, whatever epsilon is.

    Raises
    ------
    ValueError
        No key (content-derived ids need keyed noise: ``--key-file``).

    Examples
    --------
    >>> content_ids(key=bytes(32), texts=["a"])[0][:4]
    'cid:'
    >>> content_ids(key=None, texts=["a"])
    Traceback (most recent call last):
    ...
    ValueError: ids derived from the content need a key (--key-file): an unkeyed digest of a text, published as its id, lets whoever holds candidate texts confirm each one.
    """
    if key is None:
        raise ValueError(
            "ids derived from the content need a key (--key-file): an unkeyed digest of a text, "
            "published as its id, lets whoever holds candidate texts confirm each one."
        )
    k = resolve_key(key)
    if texts is not None:
        return _keyed_content_ids(k, texts=texts)
    if X is None:
        raise ValueError("give texts or X.")
    return _keyed_content_ids(k, X=X)


def refuse_protected(
    metadata: dict[str, Any],
    source: Any,
    *,
    allow: bool = False,
    hint: str = "pass --allow-reprotect to protect it again (the guarantees compose)",
) -> None:
    """The one rule on protected inputs: a file whose metadata says it holds protected vectors
    is refused unless ``allow`` -- protecting it again composes two guarantees silently, and
    measuring it as if it were clean (``evaluate``, ``advise``) reports the utility and the
    attacks of the wrong vectors. ``hint`` says what to do instead.

    Examples
    --------
    >>> refuse_protected({"protected": False}, "x.npy")
    >>> refuse_protected({"protected": True, "guarantee_text": "10-LDP"}, "p.npy")
    Traceback (most recent call last):
    ...
    ValueError: p.npy is already protected (10-LDP); pass --allow-reprotect to protect it again (the guarantees compose).
    """
    if metadata.get("protected") and not allow:
        raise ValueError(
            f"{source} is already protected ({metadata.get('guarantee_text', 'unknown mechanism')}"
            f"); {hint}."
        )


def release_metadata(meta_in: Mapping[str, Any], protection: Mapping[str, Any]) -> dict[str, Any]:
    """File metadata of a release: the input's own entries without those of any earlier
    protection (:data:`PROTECTION_KEYS`: an earlier key id or projection must not describe this
    release), then this release's ``protection``, and ``previous_protection`` (mechanism and
    guarantee) when the input was already protected.

    Examples
    --------
    >>> old = {"source": "notes", "protected": True, "mechanism": "laplace", "key_id": "k1"}
    >>> out = release_metadata(old, {"protected": True, "mechanism": "gaussian"})
    >>> sorted(out), out["previous_protection"]
    (['mechanism', 'previous_protection', 'protected', 'source'], {'mechanism': 'laplace'})
    """
    out = {k: v for k, v in meta_in.items() if k not in PROTECTION_KEYS}
    out.update(protection)
    if meta_in.get("protected"):
        out["previous_protection"] = {
            k: meta_in[k] for k in ("mechanism", "guarantee") if k in meta_in
        }
    return out


def check_randomness(key: Any, rng: Any, *, key_name: str = "key", rng_name: str = "seed") -> None:
    """The one rule on a release's randomness: a key (keyed noise, deterministic per record) or
    a seed (reproducible experiments), never both -- a seed would silently lose to the key or
    the key to the seed. Front ends call it to refuse before any work; :class:`Release` does.

    Examples
    --------
    >>> check_randomness(None, 3)
    >>> check_randomness(b"k" * 32, 3, key_name="--key-file", rng_name="--seed")
    Traceback (most recent call last):
    ...
    ValueError: give --seed or --key-file, not both (keyed noise is deterministic).
    """
    if key is not None and rng is not None:
        raise ValueError(f"give {rng_name} or {key_name}, not both (keyed noise is deterministic).")


def charge_text(mechanism: Mechanism) -> str:
    """What one release charges per record, in words, at the point of use.

    Examples
    --------
    >>> from privembed import LaplaceMechanism
    >>> charge_text(LaplaceMechanism(epsilon=50.0))
    'charged 100-LDP per record (50-d_X per unit of l2 distance on unit vectors: any two differ by at most 2)'
    """
    g = mechanism.guarantee
    try:
        c = cost_of(g)
    except ValueError as exc:
        return f"not chargeable: {exc}"
    if c.noise_multiplier is not None:
        return (
            f"charged as Gaussian noise with multiplier {c.noise_multiplier:.4g} per record "
            f"({g.short()}; repeated releases compose by the PLD accountant)"
        )
    if isinstance(g, MetricDP):
        pure = next(x for x in g.implied if isinstance(x, PureDP))
        factor = pure.epsilon / g.epsilon if g.epsilon else math.inf
        return (
            f"charged {pure.epsilon:.4g}-LDP per record ({g.epsilon:.4g}-d_X per unit of "
            f"{g.metric_name} distance on unit vectors: any two differ by at most "
            f"{factor:.4g})"
        )
    return f"charged {g.short()} per record"


class ReleasedIds:
    """The record ids a run of releases has drawn noise for, to refuse a repeated one (equal
    ids would release one record twice). In bounded memory: a set up to ``spill`` ids, then a
    private temporary SQLite file. A :class:`Release` keeps one for itself; a front end whose
    run spans several releases or stores (``protect-stream``'s batches, ``index``) keeps one for
    the run and gives it every batch's ids with :meth:`add_ids`.

    Examples
    --------
    >>> seen = ReleasedIds()
    >>> seen.add_ids(["a", 1], where="batch 1")
    >>> seen.add_ids(["1"], where="batch 2")     # the string "1" is another id than the int 1
    >>> seen.add_ids(["a"], where="batch 3")
    Traceback (most recent call last):
    ...
    privembed.ledger.DuplicateIds: record ids must be unique within one release; repeated: 'a' (equal ids would release one record twice).
    """

    def __init__(self, spill: int = 1_000_000) -> None:
        self.spill = spill
        self._mem: set[str] | None = set()
        self._db: sqlite3.Connection | None = None

    def _to_disk(self) -> sqlite3.Connection:
        db = sqlite3.connect("", isolation_level=None)  # private temporary file
        db.execute("CREATE TABLE ids (k TEXT PRIMARY KEY) WITHOUT ROWID")
        if self._mem:
            db.execute("BEGIN")
            db.executemany("INSERT INTO ids VALUES (?)", ((k,) for k in self._mem))
            db.execute("COMMIT")
        self._mem = None
        return db

    def add_ids(self, ids: Sequence[Any], *, where: str) -> None:
        """Take a batch's ids (as :func:`privembed.ledger.record_key` types them) or refuse the
        whole batch: an id of no supported type is a :class:`DataError` naming ``where``."""
        try:
            keys = [record_key(i) for i in ids]
        except TypeError as exc:
            raise DataError(f"{where}: {exc}") from None
        self.add(keys)

    def add(self, keys: list[str]) -> None:
        """Take typed keys (``record_key``'s strings) or raise :class:`DuplicateIds`."""
        if self._mem is not None and len(self._mem) + len(keys) > self.spill:
            self._db = self._to_disk()
        if self._mem is not None:
            batch = set(keys)
            if len(batch) == len(keys) and self._mem.isdisjoint(batch):
                self._mem |= batch
                return
            self._raise(self._duplicates(keys, self._mem.__contains__))  # refused whole
        assert self._db is not None
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO ids VALUES (?)", ((k,) for k in keys))
            self._db.execute("COMMIT")
        except sqlite3.IntegrityError:
            self._db.execute("ROLLBACK")
            db = self._db
            self._raise(
                self._duplicates(
                    keys, lambda k: db.execute("SELECT 1 FROM ids WHERE k = ?", (k,)).fetchone()
                )
            )

    def _duplicates(self, keys: list[str], known: Callable[[str], Any]) -> list[str]:
        """Keys repeated within ``keys`` or already released (``known``), in order."""
        seen: set[str] = set()
        dups = [k for k in keys if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        dups += [k for k in dict.fromkeys(keys) if known(k)]
        return list(dict.fromkeys(dups))

    def _raise(self, dups: list[str]) -> None:
        shown = ", ".join(display_key(k) for k in dups[:5])
        shown += f" and {len(dups) - 5} more" if len(dups) > 5 else ""
        raise DuplicateIds(
            f"record ids must be unique within one release; repeated: {shown} (equal ids "
            "would release one record twice)."
        ) from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
        key: Any = None,
        rng: Any = None,
        generator: str | None = None,
        ledger: Ledger | None = None,
        subject: str | None = None,
        model: str | None = None,
        destination: str | None = None,
        require_ids: bool = False,
        name: str = "X",
    ) -> None:
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be a Mechanism, got mechanism={mechanism!r}.")
        check_randomness(key, rng, key_name="a key", rng_name="a seed")
        self.mechanism = mechanism
        self.key = None if key is None else resolve_key(key)
        self.key_id = None if self.key is None else _key_id(self.key)
        self.generator = generator or default_keyed_generator()
        if self.generator not in ("philox", "aes"):
            raise ValueError(
                f"generator must be one of 'philox', 'aes', got generator={self.generator!r}."
            )
        self.model = model
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
        self.summary = ReleaseSummary(
            destination=destination,
            guarantee=mechanism.guarantee.describe(),
            charge=charge_text(mechanism),
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
        from . import __version__

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
        # a numpy array of integers or strings becomes Python ints or strs in one C call
        # (iterating it would make a numpy scalar per id: 5x the cost of the keyed draws' id work)
        if isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype.kind in ("i", "u", "U"):
            id_list = ids.tolist()
        else:
            id_list = list(ids)
        if len(id_list) != n:
            raise DataError(f"{self.name}: ids has {len(id_list)} entries but there are {n} rows.")
        # fast paths, equal to record_key for these inputs: plain ints, and plain strings with
        # no lone surrogates (their utf-8 round trip is the identity); one C-level pass over
        # the types instead of a Python test per id
        kinds = set(map(type, id_list))
        if kinds == {str}:
            with contextlib.suppress(UnicodeEncodeError):
                "".join(id_list).encode("utf-8")
                return ["s:" + r for r in id_list]
        elif kinds == {int}:
            return ["i:" + r for r in map(str, id_list)]
        keys = []
        for i, r in enumerate(id_list):
            try:
                keys.append(record_key(r))
            except TypeError as exc:
                raise DataError(f"{self.name}: row {self.summary.rows + i}: {exc}") from None
        return keys

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
            Content digests (keyed noise); default: :func:`privembed.keyed.vector_digests` of
            ``X``. Text front ends pass :func:`privembed.keyed.text_digests`.
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
        tags: list[bytes] | None = None
        source_for: Callable[[int, int], NoiseSource]
        if self.key is not None:
            assert keys is not None
            tag_rows = self._tagger(arr, keys, digests)
            key, gen = self.key, self.generator
            tags = [b""] * n  # filled block by block, in the sampling threads

            def keyed(start: int, stop: int) -> NoiseSource:
                # the tags' hashing holds the GIL; in the block's thread it overlaps with the
                # other threads' compiled draws, which do not
                t = tag_rows(start, stop)
                tags[start:stop] = t
                return keyed_source(key, t, generator=gen)

            source_for = keyed
        elif self._stream_key is not None:
            sk = self._stream_key

            def seeded(start: int, stop: int) -> NoiseSource:
                return CounterSource(sk, CounterSource.row_ids(offset + start, stop - start))

            source_for = seeded
        else:
            assert self._root is not None
            entropy = self._root.entropy
            from .rng import _from_seedseq

            def fresh(start: int, stop: int) -> NoiseSource:
                child = np.random.SeedSequence(entropy, spawn_key=(offset + start,))
                return GeneratorSource(_from_seedseq(child))

            source_for = fresh
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
        state.update(ledger=None, staged=None, _ids=None, needs_ids=self.keyed)
        other.__dict__.update(state)
        if self.key is not None:
            other._ids = ReleasedIds()
        return other

    def expect_rows(self, n: int) -> None:
        """Hint that this release will draw about ``n`` rows (a file's row count): keyed and
        seeded noise load the compiled per-record kernels (:mod:`privembed._jit`) up front when
        that many rows pay for them, instead of after the first 200,000. Output is unchanged."""
        if (self.key is not None and self.generator == "philox") or self._stream_key is not None:
            expect_counter_rows(n)

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


# ---------------------------------------------------------------------------------------------
# one-call front ends
# ---------------------------------------------------------------------------------------------


def protect(
    X: Any,
    mechanism: Mechanism,
    *,
    ids: Sequence[Any] | None = None,
    key: Any = None,
    rng: Any = None,
    ledger: Ledger | None = None,
    subject: str | None = None,
    model: str | None = None,
    generator: str | None = None,
) -> NDArray[Any]:
    """Protect an in-memory batch as one release (ledger committed before returning).

    Examples
    --------
    >>> from privembed import GaussianMechanism
    >>> Y = protect(np.eye(4), GaussianMechanism(epsilon=5.0, delta=1e-5), rng=0)
    >>> Y.shape
    (4, 4)
    """
    arr, single = check_embeddings(X, allow_zero=True, check_values=False)
    if single and ids is not None and (isinstance(ids, str | bytes) or np.ndim(ids) == 0):
        ids = [ids]
    with Release(
        mechanism,
        key=key,
        rng=rng,
        generator=generator,
        ledger=ledger,
        subject=subject,
        model=model,
    ) as rel:
        Y = rel.protect(arr, ids)
    return Y[0] if single else Y


@contextlib.contextmanager
def open_ledger(
    path: str | Path | Ledger | None,
    *,
    budget_epsilon: float | None = None,
    budget_delta: float | None = None,
    subject_budget: tuple[float | None, float | None] = (None, None),
    on_wait: Callable[[Path], None] | None = None,
    timeout: float = 60.0,
) -> Iterator[Ledger | None]:
    """The one way a release path opens its privacy ledger (the CLI, the stores, shards and the
    server all come here).

    ``path`` None: no ledger, and then no budget may be given (a budget nobody enforces would be
    a false promise). A path or ``postgresql://`` URL is opened for this one use
    (:func:`privembed.ledger.ledger_for_command`: a ledger file this use created is removed again
    if it fails before committing anything), an open :class:`Ledger` is used as it is. The
    budgets may set a first budget or confirm or lower the stored one, never raise it
    (:meth:`Ledger.confirm_budget`; raising is ``privembed ledger budget --raise``).
    """
    if path is None:
        if any(b is not None for b in (budget_epsilon, budget_delta, *subject_budget)):
            raise ValueError(
                "a budget (--budget-epsilon/--budget-delta, --subject-budget-*) needs a ledger: "
                "give --ledger."
            )
        yield None
        return
    if isinstance(path, Ledger):
        path.confirm_budget(budget_epsilon, budget_delta)
        path.confirm_budget(*subject_budget, subject=True)
        yield path
        return
    with ledger_for_command(path, on_wait=on_wait, timeout=timeout) as led:
        led.confirm_budget(budget_epsilon, budget_delta)
        led.confirm_budget(*subject_budget, subject=True)
        yield led


def _column_values(table: Any, name: str, where: str) -> list[Any]:
    """The values of the column (or field) ``name`` of an Arrow table of other columns."""
    have = [] if table is None else list(table.column_names)
    if name not in have:
        raise DataError(
            f"{where} has no column or field {name!r} to read subjects from (its other "
            f"columns: {', '.join(have) or 'none'}); subjects come from a Parquet column or a "
            "field of a file of texts."
        )
    return list(table.column(name).to_pylist())


@cooperative
def protect_file(
    src: str | Path,
    dst: str | Path,
    mechanism: Mechanism,
    *,
    key: Any = None,
    rng: Any = None,
    generator: str | None = None,
    ledger: str | Path | Ledger | None = None,
    budget_epsilon: float | None = None,
    budget_delta: float | None = None,
    subject: str | None = None,
    column: str | None = None,
    id_column: str | None = None,
    text_field: str = "text",
    ids_from_content: bool = False,
    model: str | None = None,
    embedder: Any = None,
    batch_rows: int = 4096,
    allow_reprotect: bool = False,
    overwrite: bool = True,
    ledger_timeout: float = 60.0,
    keep_columns: Sequence[str] = (),
    eraser: Any = None,
    subject_column: str | None = None,
    subject_budget_epsilon: float | None = None,
    subject_budget_delta: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_wait: Callable[[Path], None] | None = None,
) -> ReleaseSummary:
    """Protect an embeddings file (or a file of texts, embedded first) into ``dst``.

    The output is written to a temporary file, the release is committed in the ledger (if
    any), and only then is the file renamed into place: never an output without its ledger
    rows. See :class:`Release` for ids, keyed noise and checks.

    The output holds the ids and the protected embeddings. Other columns of a Parquet input
    are dropped (named in :attr:`ReleaseSummary.notes`) unless named in ``keep_columns``:
    nothing leaves unprotected unless asked for by name.

    ``subject_column`` names the column (Parquet) or field (texts) that holds each record's
    subject -- a patient, a user -- charged in the ledger with its per-subject budget
    (``subject_budget_epsilon``/``_delta`` set a first one or confirm or lower it): the limit
    on one person's notes released under many ids, which per-record budgets cannot see.

    ``eraser`` (a pre-noise step: a :class:`~privembed.concepts.ConceptEraser`, loaded from a
    file or a concept profile with :func:`privembed.concepts.load_eraser`) removes a concept
    from every vector before the noise: pre-processing, so the mechanism's guarantee holds as
    stated; the erasure itself has none.

    Raises
    ------
    privembed.DataError, ValueError, FileNotFoundError, FileExistsError
        Bad input, parameters or destination -- before anything is written.
    privembed.ledger.BudgetExceeded
        The ledger refused the release (nothing is published).
    """
    from . import io

    src, dst = Path(src), Path(dst)
    io.detect_format(dst)
    io.check_input_format(src)  # embeddings or texts: the message lists both
    if not src.exists():
        raise FileNotFoundError(f"file not found: {src}")
    if not overwrite and dst.exists():
        raise FileExistsError(f"output exists: {dst} (pass --overwrite to replace it).")
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    if ids_from_content and key is None:
        content_ids(key=None)  # refused before anything is read or written
    if subject_column is not None and ledger is None:
        raise ValueError("--subject-field charges subjects in the ledger: give --ledger.")
    subject_budget = (subject_budget_epsilon, subject_budget_delta)
    erase = _check_eraser(eraser)
    io.preload(src, dst)  # no lazy import runs once the output is open (cancel.py)
    checkpoint("command.start")
    if is_text_file(src, text_field=text_field):
        return _protect_texts_file(
            src,
            dst,
            mechanism,
            key=key,
            rng=rng,
            generator=generator,
            ledger=ledger,
            budget_epsilon=budget_epsilon,
            budget_delta=budget_delta,
            subject=subject,
            text_field=text_field,
            id_field=id_column or "id",
            ids_from_content=ids_from_content,
            model=model,
            embedder=embedder,
            overwrite=overwrite,
            ledger_timeout=ledger_timeout,
            keep_columns=keep_columns,
            erase=erase,
            subject_column=subject_column,
            subject_budget=subject_budget,
            on_start=on_start,
            on_batch=on_batch,
            on_wait=on_wait,
        )
    meta_in = io.read_metadata(src)
    refuse_protected(meta_in, src, allow=allow_reprotect)
    model_id = (
        model
        or meta_in.get("embedding_model_identity")
        or meta_in.get("embedding_model")
        or meta_in.get("model")
    )
    with (
        open_ledger(
            ledger,
            budget_epsilon=budget_epsilon,
            budget_delta=budget_delta,
            subject_budget=subject_budget,
            on_wait=on_wait,
            timeout=ledger_timeout,
        ) as led,
        Release(
            mechanism,
            key=key,
            rng=rng,
            generator=generator,
            ledger=led,
            subject=subject,
            model=model_id,
            destination=str(dst.resolve()),
            name=src.name,
        ) as rel,
    ):

        def fn(batch: Any) -> NDArray[Any]:
            ids = batch.ids
            if ids is None and ids_from_content and rel.needs_ids:
                ids = content_ids(key=rel.key, X=batch.X)  # the vectors as given, before erasure
            X = batch.X if erase is None else _erased(erase, batch.X, src.name, batch.start)
            subjects = (
                None
                if subject_column is None
                else _column_values(batch.extra, subject_column, src.name)
            )
            return rel.protect(X, ids, row_offset=batch.start, subjects=subjects)

        def meta(m: dict[str, Any]) -> dict[str, Any]:
            _n, dim, _, _ = io.iter_batches(src, batch_rows=1, column=column, id_column=id_column)
            out = release_metadata(m, rel.metadata(dim if dim > 0 else None))
            if erase is not None:
                out["concept_erasure"] = _erasure_metadata(erase)
            return out

        def started(n: int) -> None:
            rel.expect_rows(n)
            if on_start is not None:
                on_start(n)

        done = io.transform_file(
            src,
            dst,
            fn,
            metadata=meta,
            batch_rows=batch_rows,
            column=column,
            id_column=id_column,
            on_start=started,
            on_batch=on_batch,
            commit=rel.commit,
            overwrite=overwrite,
            keep_columns=keep_columns,
        )
        checkpoint("publish.after", stop=False)  # complete: a late signal changes nothing
        rel.mark_published()
        if keep_columns:
            rel.summary.notes.append(f"kept as they are (not protected): {', '.join(keep_columns)}")
        if done["dropped_columns"]:
            rel.summary.notes.append(
                f"dropped columns {', '.join(done['dropped_columns'])} (not protected; keep "
                "one with --keep-field NAME)"
            )
        return rel.summary


def _row_digests(Y: NDArray[Any]) -> list[str]:
    """Hex SHA-256 (128 bits) of every output row's bytes, as the ledger records them."""
    Yc = np.ascontiguousarray(Y)
    if Yc.shape[0] == 0:
        return []
    width = Yc.shape[1] * Yc.itemsize
    mv = Yc.data.cast("B")
    sha = hashlib.sha256
    return [sha(mv[i * width : (i + 1) * width]).hexdigest()[:32] for i in range(Yc.shape[0])]


def _check_eraser(eraser: Any) -> Any:
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


def _erasure_metadata(erase: Any) -> dict[str, Any]:
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


def _erased(erase: Any, X: Any, name: str, start: int) -> NDArray[Any]:
    # the input is checked as given (erasing a zero or NaN row would hide it)
    arr, _ = check_embeddings(X, name=name, row_offset=start)
    if arr.ndim != 2 or arr.shape[1] != erase.dim:
        raise DataError(
            f"{name}: the eraser is for dimension {erase.dim}, the embeddings have "
            f"{arr.shape[-1]} (rows from {start})."
        )
    return np.asarray(erase.transform(arr, renormalize=True), dtype=arr.dtype)


def is_text_file(path: str | Path, *, text_field: str = "text") -> bool:
    """Whether ``path`` holds texts (``.txt``, ``.csv``, JSONL or Parquet with a
    ``text_field`` and no embeddings) rather than embeddings (:func:`privembed.io.holds_texts`)."""
    from .io import holds_texts

    return holds_texts(path, text_field=text_field)


def _protect_texts_file(
    src: Path,
    dst: Path,
    mechanism: Mechanism,
    *,
    key: Any,
    rng: Any,
    generator: str | None,
    ledger: str | Path | Ledger | None,
    budget_epsilon: float | None,
    budget_delta: float | None,
    subject: str | None,
    text_field: str,
    id_field: str,
    ids_from_content: bool,
    model: str | None,
    embedder: Any,
    overwrite: bool,
    ledger_timeout: float,
    keep_columns: Sequence[str],
    erase: Any,
    subject_column: str | None,
    subject_budget: tuple[float | None, float | None],
    on_start: Callable[[int], None] | None,
    on_batch: Callable[[int], None] | None,
    on_wait: Callable[[Path], None] | None,
) -> ReleaseSummary:
    from . import io

    table = io.read_text_table(src, text_field=text_field, id_field=id_field)
    ids, texts = table.ids, table.texts
    others = [] if table.columns is None else list(table.columns.column_names)
    keep = list(dict.fromkeys(str(k) for k in keep_columns))
    missing = [k for k in keep if k not in others]
    if missing:
        raise DataError(
            f"{src.name} has no field {missing[0]!r} to keep (its other fields: "
            f"{', '.join(others) or 'none'})."
        )
    if keep and io.detect_format(dst) not in ("parquet", "jsonl"):
        raise ValueError(
            f"keeping fields ({', '.join(keep)}) needs a Parquet or JSONL output, got {dst.name}."
        )
    needs_ids = key is not None or ledger is not None
    if ids is None and needs_ids:
        if not ids_from_content:
            raise DataError(
                f"{src.name}: keyed noise and the ledger need record ids, and these texts have "
                f"none (line numbers are not ids); add an {id_field!r} field (--id-field) or "
                "derive ids from the text (--ids-from-content)."
            )
        ids = content_ids(key=key, texts=texts)
    if embedder is None:
        from .embedders import Embedder

        embedder = Embedder(model)
    emb_meta = embedder.metadata()
    # keyed noise is bound to what computes the vectors (a digest), never to a model's name;
    # embedders of the caller's own say what identifies them in their metadata
    model_id = str(
        emb_meta.get("embedding_model_identity")
        or emb_meta.get("model_id")
        or emb_meta.get("embedding_model")
    )
    subjects = (
        None if subject_column is None else _column_values(table.columns, subject_column, src.name)
    )
    with (
        open_ledger(
            ledger,
            budget_epsilon=budget_epsilon,
            budget_delta=budget_delta,
            subject_budget=subject_budget,
            on_wait=on_wait,
            timeout=ledger_timeout,
        ) as led,
        Release(
            mechanism,
            key=key,
            rng=rng,
            generator=generator,
            ledger=led,
            subject=subject,
            model=model_id,
            destination=str(dst.resolve()),
            name=src.name,
        ) as rel,
    ):
        if on_start:
            on_start(len(texts))
        done = 0

        def progress(rows: int) -> None:  # the embedder counts rows so far; the bar, steps
            nonlocal done
            if on_batch and rows > done:
                on_batch(rows - done)
            done = max(done, rows)
            checkpoint("batch.read")

        # after the ledger's budget check; progress from embedders that report it
        if "on_progress" in inspect.signature(embedder.encode).parameters:
            X = embedder.encode(texts, on_progress=progress)
        else:
            X = np.asarray(embedder.encode(texts))
        digests = None
        if key is not None:  # the noise is bound to the text and, with an eraser, to it too
            digests = text_digests(texts, model_id)
            if erase is not None:
                salt = _erasure_metadata(erase)["digest"].encode()
                digests = [hashlib.sha256(salt + d).digest() for d in digests]
        if erase is not None:
            X = _erased(erase, X, src.name, 0)
        Y = rel.protect(X, ids, digests=digests, subjects=subjects)
        if on_batch and done < len(texts):
            on_batch(len(texts) - done)
        io.write_embeddings(
            dst,
            Y,
            ids=ids,
            metadata={
                **emb_meta,
                **rel.metadata(X.shape[1]),
                **({} if erase is None else {"concept_erasure": _erasure_metadata(erase)}),
            },
            extra=table.columns.select(keep) if keep else None,
            src=src,
            commit=rel.commit,
            overwrite=overwrite,
        )
        checkpoint("publish.after", stop=False)
        rel.mark_published()
        if keep:
            rel.summary.notes.append(f"kept as they are (not protected): {', '.join(keep)}")
        dropped = [c for c in others if c not in keep]
        if dropped:
            rel.summary.notes.append(
                f"dropped fields {', '.join(dropped)} (not protected; keep one with "
                "--keep-field NAME)"
            )
        return rel.summary
