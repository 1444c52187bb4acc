"""Indexing a file into a protected collection (``privembed index``): :func:`index_file`.

The file -- embeddings, or texts embedded here -- is read batch by batch (:class:`_IndexInput`),
each batch protected and upserted by :meth:`ProtectedCollection.add
<privembed.integrations.collection.ProtectedCollection.add>` (or upserted as the releases it
holds), record ids checked unique over the whole file in bounded memory; meanwhile a uniform
sample of the documents is kept (:class:`_Reservoir`, as row numbers where the file can be read
again) for the collection's clean-score profile (:class:`_ProfileSample`), sealed once the
store is closed and its vectors freed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings
from ..core.cancel import checkpoint, cooperative
from ..evaluation.evidence import with_evidence
from ..mechanisms import Mechanism
from ..release import setting_note
from .collection_core import ProtectedCollection
from .collection_plan import _ProfileTarget


def _text_batches(
    path: Path,
    batch_rows: int,
    *,
    model: str | None,
    text_field: str,
    id_field: str,
    ids_from_content: bool,
    needs_ids: bool,
    key: Any = None,
) -> tuple[int, str, Any]:
    """(n, model id, iterator of (ids, X, texts, start)) for a file of texts, embedded here."""
    from ..data.embedders import Embedder
    from ..data.io import read_texts
    from ..release import content_ids

    ids, texts = read_texts(path, text_key=text_field, id_key=id_field)
    if ids is None:
        if needs_ids and not ids_from_content:
            raise DataError(
                f"{path.name}: keyed noise, payloads and the ledger need record ids, and these "
                f"texts have none (line numbers are not ids); add an {id_field!r} field "
                "(--id-field) or derive ids from the text (--ids-from-content)."
            )
        ids = content_ids(key=key, texts=texts) if ids_from_content else list(range(len(texts)))
    emb = Embedder(model)

    def gen() -> Any:
        for s in range(0, len(texts), batch_rows):
            chunk = texts[s : s + batch_rows]
            yield ids[s : s + batch_rows], emb.encode(chunk), chunk, s

    return len(texts), str(emb.metadata().get("embedding_model")), gen()


def _profile_query_vectors(queries: Any, model: str | None) -> NDArray[np.float32]:
    """Sample queries for the k' profile: a file of texts (embedded with ``model``) or of
    embeddings, or an array."""
    from ..release import is_text_file

    if isinstance(queries, str | Path):
        qp = Path(queries)
        if not qp.exists():
            raise FileNotFoundError(f"profile queries not found: {qp}")
        if is_text_file(qp):
            from ..data.embedders import Embedder
            from ..data.io import read_text_table

            Q = Embedder(model).encode(read_text_table(qp).texts)
        else:
            from ..data.io import read_embeddings

            Q = read_embeddings(qp).X
    else:
        Q = queries
    arr, _ = check_embeddings(Q, name="profile queries")
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise DataError("profile queries must be a non-empty (n, d) array.")
    return np.asarray(arr, dtype=np.float32)


@dataclass
class _IndexInput:
    """A file opened for :func:`index_file`: its size, metadata and model, and its batches of
    (ids, X, texts to store, other columns, first row)."""

    path: Path
    n: int
    dim: int | None
    meta: dict[str, Any]
    model: str | None
    needs_ids: bool
    wanted: list[str]
    batches: Iterator[tuple[Any, Any, Any, Any, int]]
    #: the file's batches of (X, first row) once more (an embeddings file; None for texts,
    #: embedded as they are read): the profile's sample is gathered by row number
    reread: Callable[[], Iterator[tuple[Any, int]]] | None = None

    @property
    def protection(self) -> dict[str, Any]:
        """The protection the file records (for vectors protected elsewhere)."""
        from ..release import PROTECTION_KEYS

        return {k: self.meta[k] for k in PROTECTION_KEYS if k in self.meta}

    def ids(self, ids: Any, start: int, nb: int) -> list[Any]:
        """A batch's record ids, or its row numbers where no ids are needed."""
        if ids is not None:
            return list(ids)
        if self.needs_ids:
            raise DataError(
                f"{self.path} has no record ids; keyed noise, payloads and the ledger need "
                "an id column (--id-field) in a Parquet, .npz or .jsonl file."
            )
        return list(range(start, start + nb))

    def metadata(self, extra: Any, nb: int) -> list[dict[str, Any]] | None:
        """The ``--metadata-field`` columns of a batch, one dict per row (None: none wanted)."""
        if not self.wanted:
            return None
        have = [] if extra is None else list(extra.schema.names)
        missing = [c for c in self.wanted if c not in have]
        if missing:
            raise ValueError(
                f"{self.path} has no column(s) {missing} for --metadata-field "
                f"(other columns: {have or 'none'})."
            )
        cols = {c: extra.column(c).to_pylist() for c in self.wanted}
        return [{c: cols[c][i] for c in self.wanted} for i in range(nb)]


def _index_input(
    input: str | Path,
    batch_rows: int,
    *,
    model: str | None,
    column: str | None,
    id_column: str | None,
    metadata_columns: Sequence[str] | None,
    store_text: bool,
    text_field: str,
    ids_from_content: bool,
    needs_ids: bool,
    key: Any,
) -> _IndexInput:
    """Open a file of texts (embedded here) or of embeddings for :func:`index_file`."""
    from ..data.io import iter_batches
    from ..release import is_text_file

    input = Path(input)
    if not input.exists():
        raise FileNotFoundError(f"file not found: {input}")
    wanted = list(metadata_columns or [])
    if is_text_file(input):
        if wanted:
            raise ValueError(
                "--metadata-field reads columns of an embeddings file; for texts, run "
                "'privembed embed' first (it keeps every other field)."
            )
        n, text_model, text_gen = _text_batches(
            input,
            batch_rows,
            model=model,
            text_field=text_field,
            id_field=id_column or "id",
            ids_from_content=ids_from_content,
            needs_ids=needs_ids,
            key=key,
        )
        rows = ((ids, X, tx if store_text else None, None, s) for ids, X, tx, s in text_gen)
        return _IndexInput(input, n, None, {}, text_model, needs_ids, wanted, rows)
    if store_text:
        raise ValueError("--store-text needs texts as input (this file holds embeddings).")
    n, dim, meta, raw = iter_batches(
        input, batch_rows=batch_rows, column=column, id_column=id_column
    )
    batches = ((b.ids, b.X, None, b.extra, b.start) for b in raw)
    emb_model = meta.get("embedding_model") or model
    return _IndexInput(
        input, n, dim if dim > 0 else None, meta, emb_model, needs_ids, wanted, batches,
        _rereader(input, batch_rows, column=column, id_column=id_column),
    )  # fmt: skip


def _rereader(
    path: Path, batch_rows: int, *, column: str | None, id_column: str | None
) -> Callable[[], Iterator[tuple[Any, int]]]:
    """A second pass over an embeddings file, refused if the file changed since the first."""
    from ..data.io import iter_batches

    before = path.stat()

    def again() -> Iterator[tuple[Any, int]]:
        now = path.stat()
        if (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise DataError(f"{path} changed while it was indexed; index it again.")
        _, _, _, raw = iter_batches(path, batch_rows=batch_rows, column=column,
                                    id_column=id_column)  # fmt: skip
        return ((b.X, b.start) for b in raw)

    return again


def _check_index_mode(
    source: _IndexInput,
    mechanism: Mechanism | str | None,
    *,
    key: Any,
    rng: Any,
    ledger: Any,
    payloads: bool,
    allow_reprotect: bool,
) -> None:
    """Refuse a mechanism that does not fit the input (already protected or not), a ledger
    where nothing is released here, and payloads without the exact vectors."""
    from ..release import refuse_protected

    input = source.path
    protected_in = bool(source.meta.get("protected"))
    if mechanism == "sealed":
        if protected_in:
            raise ValueError(
                f"{input} is protected: a sealed collection seals the clean embeddings (a file "
                "of releases does not hold them)."
            )
        if key is None:
            raise ValueError("a sealed collection is sealed with your key: give it (--key-file).")
        if rng is not None:
            raise ValueError("a sealed collection adds no noise: --seed does not apply.")
        if ledger is not None:
            raise ValueError(
                "a sealed collection releases no vector, so nothing is charged: --ledger does "
                "not apply."
            )
        return
    if mechanism is None:
        if not protected_in:
            raise ValueError(
                f"{input} is not protected; pass --mechanism NAME to protect it on the way in "
                "(or --mechanism none to index plain vectors)."
            )
        if key is not None or rng is not None:
            raise ValueError(f"{input} is already protected; --key-file/--seed do not apply.")
    elif mechanism == "none":
        if protected_in:
            raise ValueError(f"{input} is protected; omit --mechanism to index it as it is.")
    else:
        refuse_protected(
            source.meta,
            input,
            allow=allow_reprotect,
            hint="omit --mechanism to index it as it is, or pass --allow-reprotect",
        )
    protects = isinstance(mechanism, Mechanism)
    if ledger is not None and not protects:
        raise ValueError("--ledger records new releases; this input is not protected here.")
    if payloads and mechanism is None:
        raise ValueError(
            "payloads hold the exact vectors, which a file of releases does not have: index "
            "the clean embeddings with the mechanism instead."
        )


class _ProfileSample:
    """What a collection's clean-score profile is made from (payloads only): real queries, or
    ``count`` documents standing in for them, and a uniform sample of the documents."""

    def __init__(
        self,
        payloads: bool,
        queries: Any,
        max_docs: int,
        model: str | None,
        reread: Callable[[], Iterator[tuple[Any, int]]] | None = None,
    ) -> None:
        self.queries: NDArray[np.float32] | None = None
        if payloads and not isinstance(queries, int):
            self.queries = _profile_query_vectors(queries, model)
        elif not isinstance(queries, int) or isinstance(queries, bool):
            raise ValueError("profile queries apply to a collection with payloads (--payloads).")
        self.count = queries
        #: with a second pass over the input, the sample is kept as row numbers while the store
        #: fills (not max_docs x d) and its rows are read again once the store is closed
        self.reread = reread
        self.docs = _Reservoir(max_docs, rng=0, rows=reread is None) if payloads else None

    @property
    def source(self) -> str | None:
        """What stands for the queries: "queries", "documents", or None (no profile)."""
        if self.docs is None:
            return None
        return "queries" if self.queries is not None else "documents"

    def check_dim(self, X: Any) -> None:
        """Refuse documents whose dimension is not the real queries'."""
        if self.queries is not None and self.queries.shape[1] != np.shape(X)[1]:
            raise DataError(
                f"profile queries have dimension {self.queries.shape[1]}, the "
                f"documents {np.shape(X)[1]}."
            )

    def add(self, X: Any) -> None:
        """Offer a batch of documents to the sample."""
        if self.docs is not None:
            self.docs.add(np.asarray(X, dtype=np.float32))

    def target(self, col: ProtectedCollection, rows: int) -> _ProfileTarget | None:
        """Where the profile goes (None: no profile, or fewer than 3 documents indexed)."""
        if self.docs is None or rows < 3:
            return None
        return col._profile_target()

    def save(self, target: _ProfileTarget | None) -> None:
        """Seal the profile (``target``: :meth:`target`). The float16 sample is freed once it
        is read as float32, before the profile's own copies are made."""
        if target is None or self.docs is None:
            return
        docs = self.docs.rows() if self.reread is None else self.docs.gather(self.reread())
        self.docs = None
        if self.queries is not None:
            target.seal(self.queries, docs, rng=0, source="queries")
        else:
            pick = np.random.default_rng(1).choice(
                len(docs), size=min(int(self.count), len(docs)), replace=False
            )
            target.seal(docs[pick], docs, rng=0, source="documents")


@contextlib.contextmanager
def _removed_on_failure(store_path: Path) -> Iterator[None]:
    """Remove the store folder on failure if it did not exist before: a failed first index
    leaves no store behind."""
    created = not store_path.exists()
    try:
        yield
    except BaseException:
        if created and store_path.exists():
            import shutil

            shutil.rmtree(store_path, ignore_errors=True)
        raise


#: record ids an index checks for repeats in memory; beyond, in a private temporary SQLite
#: file (:class:`~privembed.release.ReleasedIds`): a million ids are about 100 MB in a set
SEEN_IN_MEMORY = 100_000


def _index_into(
    source: _IndexInput,
    store: str,
    path: str | Path,
    collection: str,
    profile: _ProfileSample,
    *,
    mechanism: Mechanism | str | None,
    ledger: Any,
    on_batch: Any,
    **options: Any,
) -> dict[str, Any]:
    """Open the collection and upsert every batch of ``source``, protected there (or as the
    releases they are, without a mechanism); then seal the profile. Returns the summary, with
    the setting note of a protected index (``setting``)."""
    from ..release import ReleasedIds

    seen = ReleasedIds(spill=SEEN_IN_MEMORY) if source.needs_ids else None
    rows, dim = 0, source.dim
    try:
        with _removed_on_failure(Path(path)):
            with ProtectedCollection.open(
                store,
                path,
                collection,
                mechanism=mechanism,
                protection=source.protection if mechanism is None else None,
                embedding_model=source.model,
                **options,
            ) as col:
                for b_ids, X, texts, extra, start in source.batches:
                    profile.check_dim(X)  # before the first upsert
                    nb = int(np.asarray(X).shape[0])
                    ids = source.ids(b_ids, start, nb)
                    if seen is not None:
                        seen.add_ids(ids, where=str(source.path))
                    metas = source.metadata(extra, nb)
                    if mechanism is None:
                        col.add_released(ids, X, metas, dim_in=source.meta.get("dim"))
                    else:
                        col.add(ids, X, metas, texts=texts, ledger=ledger, row_offset=start)
                    profile.add(X)
                    rows += nb
                    dim = int(np.asarray(X).shape[1])
                    if on_batch is not None:
                        on_batch(nb)
                    checkpoint("batch.written")
                target = profile.target(col, rows)
                summary = {
                    "rows": rows,
                    "n": source.n,
                    "dim": dim,
                    "total": col.store.count(),
                    "treatment": col.treatment.description,
                    "guarantee": col.protection.get("guarantee_text", "none (unprotected)"),
                    "payloads": col.has_payloads,
                    "sealed": col.sealed,
                    "profile": profile.source,
                    # what the setting does to vectors of this dimension (a SettingNote; None for
                    # vectors indexed as the releases they are)
                    "setting": with_evidence(
                        setting_note(mechanism, dim),
                        mechanism,
                        model=source.model,
                        keyed=col.key is not None,
                        ledger=ledger is not None,
                    )
                    if isinstance(mechanism, Mechanism) and dim is not None and dim >= 2
                    else None,
                }
            # the store is closed and its vectors freed before the profile copies the sample:
            # peak memory is the larger of the two, not their sum
            del col
            profile.save(target)
        return summary
    finally:
        if seen is not None:
            seen.close()


@cooperative
def index_file(
    input: str | Path,
    store: str,
    path: str | Path,
    collection: str = "privembed",
    *,
    mechanism: Mechanism | str | None = None,
    key: Any = None,
    rng: Any = None,
    ledger: Any = None,
    column: str | None = None,
    id_column: str | None = None,
    metadata_columns: Sequence[str] | None = None,
    model: str | None = None,
    batch_rows: int = 4096,
    allow_reprotect: bool = False,
    payloads: bool = False,
    payload_dtype: str = "float32",
    pad_to: int | str = "padme",
    store_text: bool = False,
    text_field: str = "text",
    ids_from_content: bool = False,
    profile_queries: Any = 200,
    profile_max_docs: int = 200_000,
    store_options: dict[str, Any] | None = None,
    on_start: Any = None,
    on_batch: Any = None,
) -> dict[str, Any]:
    """Protect an embeddings file -- or a file of texts, embedded here -- batch by batch and
    upsert it into a store (``privembed index``).

    ``mechanism=None`` indexes a file already protected by ``privembed protect`` under the
    configuration it records; ``"none"`` indexes plain vectors. Each batch is one release,
    recorded in the ``ledger`` before its upsert; record ids must be unique over the whole
    file (checked in bounded memory, so a second copy of an id is refused, not recorded free).

    With ``payloads`` (needs the key) every record's exact vector -- and with ``store_text`` its
    text -- is sealed beside its protected vector for exact re-ranking
    (:meth:`ProtectedCollection.query` ``rerank=``), and a clean-score profile of the corpus
    is sealed too, for ``recall=``: sample queries against up to ``profile_max_docs``
    documents (a uniform sample beyond that). ``profile_queries`` is a file of real queries
    (texts, embedded with the collection's model, or embeddings) or an array of their
    embeddings -- best -- or a number of documents to stand in for them, diluted into
    pseudo-queries (:func:`privembed.search.rerank.pseudo_queries`; documents as they are make ``k'``
    too small where queries and documents differ).

    ``mechanism="sealed"`` (needs the key) stores no vector: each record's exact vector, text
    (``store_text``) and metadata are sealed into its payload beside a constant placeholder,
    and searches rank on the client (:class:`ProtectedCollection`); ``payloads`` is implied and
    no profile is made (there is no k' to plan).

    ``store_options`` go to the store (:func:`privembed.integrations.stores.open_store`), e.g.
    ``{"factory": "SQfp16"}`` for a FAISS index of half-precision vectors.

    Returns
    -------
    dict
        ``rows``, ``n``, ``dim``, ``total`` (vectors in the collection), ``treatment``,
        ``guarantee``, ``payloads``, ``sealed``, ``profile`` (what stood for the queries, or
        None), ``setting`` (the :class:`~privembed.release.SettingNote` of a protected index,
        or None).
    """
    source = _index_input(
        input,
        batch_rows,
        model=model,
        column=column,
        id_column=id_column,
        metadata_columns=metadata_columns,
        store_text=store_text,
        text_field=text_field,
        ids_from_content=ids_from_content,
        needs_ids=key is not None or ledger is not None or payloads or mechanism == "sealed",
        key=key,
    )
    if on_start is not None:
        on_start(source.n)
    _check_index_mode(
        source,
        mechanism,
        key=key,
        rng=rng,
        ledger=ledger,
        payloads=payloads,
        allow_reprotect=allow_reprotect,
    )
    sealed = mechanism == "sealed"
    if sealed and not isinstance(profile_queries, int):
        raise ValueError("a sealed collection ranks exactly: profile queries do not apply.")
    profile = _ProfileSample(
        payloads and not sealed, profile_queries, profile_max_docs, source.model, source.reread
    )
    return _index_into(
        source,
        store,
        path,
        collection,
        profile,
        mechanism=mechanism,
        ledger=ledger,
        on_batch=on_batch,
        store_options=store_options,
        key=key,
        rng=rng,
        payloads=payloads or sealed or None,
        payload_dtype=payload_dtype,
        pad_to=pad_to,
    )


class _Reservoir:
    """A uniform sample of at most ``cap`` rows of a stream (Vitter's algorithm R): the row
    numbers it holds and, with ``rows``, the rows themselves in float16.

    Vectorised per batch, with the draws of the row-at-a-time algorithm: row ``s`` of the
    stream (``s >= cap``) takes slot ``integers(0, s + 1)`` when that is below ``cap``, the
    bounds of a batch drawn in one call (the same stream of numbers), and a later row of a
    batch drawn to the same slot as an earlier one replaces it. Holds ``cap`` row numbers, and
    ``cap`` x d float16 with ``rows``; without, :meth:`gather` reads the rows from a second
    pass over the stream.
    """

    def __init__(self, cap: int, *, rng: Any = None, rows: bool = True) -> None:
        self.cap = int(cap)
        self.seen = 0
        self.keep_rows = bool(rows)
        self._which = np.empty(0, dtype=np.int64)  # the stream row in each slot
        self._parts: list[NDArray[np.float16]] = []  # the first rows, until the sample is full
        self._rows: NDArray[np.float16] | None = None
        self._gen = np.random.default_rng(rng)

    def add(self, X: NDArray[Any]) -> None:
        A = np.asarray(X, dtype=np.float16) if self.keep_rows else np.asarray(X)
        n = int(A.shape[0])
        take = max(0, min(n, self.cap - self.seen))
        if take:
            self._which = np.concatenate([self._which, np.arange(self.seen, self.seen + take)])
            if self.keep_rows:
                self._parts.append(np.array(A[:take]))
        if take < n:
            if self.keep_rows and self._rows is None:
                self._rows = self._filled(A.shape[1])
            high = np.arange(self.seen + take + 1, self.seen + n + 1, dtype=np.int64)
            slot = self._gen.integers(0, high)
            hit = np.flatnonzero(slot < self.cap)
            # the last row drawn to a slot is the one that stays there
            _, last = np.unique(slot[hit][::-1], return_index=True)
            keep = hit[hit.size - 1 - last]
            self._which[slot[keep]] = self.seen + take + keep
            if self._rows is not None:
                self._rows[slot[keep]] = A[take + keep]
        self.seen += n

    def _filled(self, dim: int) -> NDArray[np.float16]:
        rows = np.concatenate(self._parts) if self._parts else np.empty((0, dim), np.float16)
        self._parts = []
        return rows

    def rows(self) -> NDArray[np.float32]:
        """The sample as float32, in slot order (kept rows only)."""
        if not self.keep_rows:
            raise ValueError("this sample keeps row numbers only: gather() its rows.")
        if self._rows is None:
            if not self._parts:
                return np.empty((0, 0), dtype=np.float32)
            self._rows = self._filled(self._parts[0].shape[1])
        return self._rows.astype(np.float32)

    def gather(self, batches: Iterator[tuple[Any, int]]) -> NDArray[np.float32]:
        """The sample as float32, in slot order, read from ``batches`` of (X, first row) of the
        same stream again: what :meth:`rows` returns when the rows are kept."""
        which = self._which
        out: NDArray[np.float16] | None = None
        found = 0
        for X, start in batches:
            A = np.asarray(X)
            if out is None:
                out = np.empty((which.size, A.shape[1]), dtype=np.float16)
            here = np.flatnonzero((which >= start) & (which < start + A.shape[0]))
            out[here] = np.asarray(A[which[here] - start], dtype=np.float16)
            found += here.size
        if out is None or found != which.size:
            raise DataError("the input ended before the rows of the profile's sample.")
        return out.astype(np.float32)
