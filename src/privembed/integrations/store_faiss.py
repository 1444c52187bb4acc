"""FAISS (one local index file, payloads in a file beside it) behind
:class:`~privembed.integrations.store_base.VectorStore`."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import secrets
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_embeddings, check_int
from .store_arrays import _gather, _IdLabels, _npy_rows, _Strings
from .store_base import (
    DEFAULT_COLLECTION,
    HNSW_EF_FACTOR,
    HNSW_EF_MIN,
    PAYLOAD_KEY,
    Candidates,
    Hit,
    OpenOptions,
    VectorStore,
    _Batch,
    _decode_payload,
    _joined,
)

__all__ = ["FAISS_LAYOUT", "FAISS_ONE_THREAD_BELOW", "PAYLOAD_MAP_CHUNK", "FaissStore"]


#: layout of the index file this version writes. Layout 1 (privembed before 0.x of issue 27)
#: kept each record's payload as base64 inside its metadata, in a fixed-width string array
#: (every record as wide as the longest): it is still read, and rewritten as layout 2 on the
#: next save or by :meth:`FaissStore.compact`.
FAISS_LAYOUT = 2
#: searches of fewer queries than this run FAISS on one OpenMP thread: for a flat index FAISS
#: parallelises over queries below its BLAS threshold (20), so a lone query gains nothing
#: from a second thread but pays for waking it (docs/benchmarks.md, re-rank latency)
FAISS_ONE_THREAD_BELOW = 20
#: payloads a re-rank reads through one memory map of the payload file: the pages a map
#: touches count in the process' memory until it is closed, and on Linux 6.18 each payload
#: touched at random in a 1.66 GB payload file (1M records) brought ~640 kB in with it despite
#: MADV_RANDOM (1,000 payloads through one map: +633 MB peak RSS; through maps of 64: +67 MB;
#: benchmarks/bench_memory.py), so a map covers few payloads
PAYLOAD_MAP_CHUNK = 64
#: the zip member of a layout-2 index file that holds FAISS's own serialisation of the index
_INDEX_MEMBER = "index.faiss"


@contextlib.contextmanager
def _faiss_threads(faiss: Any, nq: int) -> Any:
    """FAISS on one OpenMP thread for a search of few queries, in the calling thread only
    (libgomp keeps the thread count per thread), restored afterwards."""
    if nq >= FAISS_ONE_THREAD_BELOW:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class FaissStore(VectorStore):
    """A FAISS index in a local file, ``<path>/<collection>.faiss.npz``, for large collections.

    The index file holds the serialised index, the id map (FAISS labels are int64; label ``i``
    is the ``i``-th record id ever added), each record's metadata (JSON), the position of its
    sealed payload and the privembed info -- ids and metadata as UTF-8 bytes with offsets, so a
    record costs what its text costs. The payloads themselves (AES-GCM ciphertext, about
    4·d + 45 bytes) sit as raw bytes, one after another, in
    ``<path>/<collection>.faiss.<token>.payloads``: opening the store never reads them, a search
    reads those of its hits by position. With payloads a record takes its vector's bytes plus
    its payload's, about 2.05× the vectors at d = 384 (docs/benchmarks.md).

    The index file is loaded whole, changed in memory, and written atomically (temporary file +
    rename) by :meth:`save` and on :meth:`close`. Payloads are appended to their file as they
    are upserted, and flushed to disk before an index file that refers to them replaces the old
    one: a crash leaves the previous index with its payloads (bytes appended since are
    unreferenced), never an index pointing at missing bytes. A replaced payload's old bytes stay
    until the file is rewritten -- by :meth:`compact`, or by a save once they are more than
    half of it. Index files of the earlier layout (payloads as base64 in the metadata) open as
    they are and are converted by their next save (any upsert) or by :meth:`compact`.

    One process writes a store at a time (the last :meth:`save` wins); readers in other
    processes see the store as it was when they opened it.

    Parameters
    ----------
    factory : str, optional
        FAISS ``index_factory`` description of a new index (wrapped in ``IDMap2``; default
        ``"Flat"``): ``"Flat"`` searches exactly; ``"SQfp16"`` keeps the vectors in half
        precision (half the memory, a faster scan; scores within about 1e-3 of float32's, so
        the k' candidates of a re-rank are the same in practice: docs/benchmarks.md);
        ``"HNSW32"`` is approximate (searched with ``efSearch`` = max(256, 2 k) for a depth
        k; its recall of the exact top k' is measured by :meth:`search_recall` and folded into
        the k' of ``recall=``), pays on low-dimensional or lightly perturbed vectors (a
        subspace store; at Laplace epsilon <= 200 in 384 dimensions a search deep enough to keep
        the exact top k' costs what the flat scan costs: docs/benchmarks.md), and cannot replace
        existing ids. An existing store keeps the index it was made with (a different
        ``factory`` for it is refused). For ``metric="cosine"`` vectors and queries are
        normalised and searched by inner product.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with FaissStore(tmp, "demo") as s:
    ...         s.upsert(["a", "b"], np.array([[1.0, 0.0], [0.0, 1.0]]), [{"n": 1}, None])
    ...     with FaissStore(tmp, "demo", create=False) as s:  # reopened from the file
    ...         hit = s.search(np.array([1.0, 0.1]), k=1)[0][0]
    ...         (hit.id, round(hit.score, 3), hit.metadata, s.count(), s.metric)
    ('a', 0.995, {'n': 1}, 2, 'cosine')
    """

    name = "faiss"
    suffix = ".faiss.npz"
    #: a save rewrites the payload file when unreferenced bytes exceed half of it and this many
    compact_after_bytes = 64 << 20

    def __init__(
        self,
        path: str | Path,
        collection: str = DEFAULT_COLLECTION,
        *,
        factory: str | None = None,
        **options: Unpack[OpenOptions],
    ) -> None:
        if factory is not None and (not isinstance(factory, str) or not factory):
            raise ValueError(
                f"factory must be a FAISS index_factory string, got factory={factory!r}."
            )
        self.factory = factory or "Flat"
        super().__init__(path, collection, **options)
        made = self._info.get("factory") if self._exists else None
        if made is not None:
            if factory is not None and factory != made:
                self.close()
                raise ValueError(
                    f"FAISS store {self.file} was made with the index {made!r}, not "
                    f"{factory!r}: a store keeps its index (make a new store for another)."
                )
            self.factory = str(made)

    @property
    def file(self) -> Path:
        """The index file."""
        return self.path / f"{self.collection}{self.suffix}"

    @property
    def payload_file(self) -> Path | None:
        """The file of sealed payloads (``None`` until the first payload is stored)."""
        return self._pfile

    @property
    def layout(self) -> int:
        """Layout of the index file as it is on disk (:data:`FAISS_LAYOUT` once saved)."""
        return self._layout

    def _open(self) -> dict[str, Any] | None:
        self._faiss = require("faiss", "text", purpose="the FAISS vector store")
        self._index: Any = None
        self._ids = _Strings()
        self._label_map: _IdLabels | None = None  # built on first use (:attr:`_labels`)
        self._meta = _Strings()
        #: (offset, length) of each label's payload in the payload file; length -1: none
        self._pos = np.zeros((0, 2), dtype=np.int64)
        self._legacy: dict[int, bytes] = {}  # payloads read from a layout-1 file, until saved
        self._pfile: Path | None = None
        self._pfh: Any = None
        self._unflushed = False
        self._garbage = 0
        self._layout = FAISS_LAYOUT
        self._dirty = False
        if not self.file.exists():
            return None
        try:
            with zipfile.ZipFile(self.file) as zf:
                if _INDEX_MEMBER in zf.namelist():
                    info = self._read_layout2(zf)
                else:
                    self._layout = 1
            if self._layout == 1:
                with np.load(self.file, allow_pickle=False) as z:
                    info = json.loads(str(z["info"]))
                    self._index = self._faiss.deserialize_index(
                        np.array(z["index"], dtype=np.uint8)
                    )
                self._read_layout1()
        except (OSError, ValueError, KeyError, IndexError, RuntimeError, zipfile.BadZipFile) as exc:
            self._close_files()
            raise DataError(f"cannot read FAISS store {self.file}: {exc}") from None
        self._present = np.zeros(len(self._ids), dtype=bool)
        if self._index.ntotal:
            self._present[self._label_array()] = True
        return dict(info)

    def _read_layout2(self, zf: zipfile.ZipFile) -> dict[str, Any]:
        """Read a layout-2 file; returns the info. The index is streamed from the zip into
        FAISS, so opening costs the index itself, not two more copies of it."""

        def array(name: str) -> NDArray[Any]:
            with zf.open(f"{name}.npy") as fh:
                return np.lib.format.read_array(fh, allow_pickle=False)

        layout = int(array("layout"))
        if layout != FAISS_LAYOUT:
            raise ValueError(f"layout {layout} is newer than this privembed reads ({FAISS_LAYOUT})")
        info = json.loads(str(array("info")))
        with zf.open(_INDEX_MEMBER) as fh:
            self._index = self._faiss.read_index(self._faiss.PyCallbackIOReader(fh.read, 1 << 20))
        self._ids = _Strings(array("ids").tobytes(), array("ids_off"))
        self._meta = _Strings(array("meta").tobytes(), array("meta_off"))
        pos = np.array(array("payload_pos"), dtype=np.int64).reshape(-1, 2)
        if len(self._meta) != len(self._ids) or pos.shape[0] != len(self._ids):
            raise ValueError("ids, metadata and payload positions differ in length")
        self._pos = pos
        name = str(array("payload_file"))
        if not name:
            if (pos[:, 1] >= 0).any():
                raise ValueError("payload positions without a payload file")
            return info
        if Path(name).name != name or not name.startswith(f"{self.collection}.faiss."):
            raise ValueError(f"bad payload file name {name!r}")
        pfile = self.path / name
        if not pfile.exists():
            raise ValueError(f"its payload file {name} is missing")
        self._pfile = pfile
        self._pfh = pfile.open("r+b")
        size = os.fstat(self._pfh.fileno()).st_size
        live = pos[pos[:, 1] >= 0]
        if live.size and (live[:, 0].min() < 0 or int((live[:, 0] + live[:, 1]).max()) > size):
            raise ValueError(f"its payload file {name} is shorter than the index says")
        self._garbage = size - int(live[:, 1].sum())
        return info

    def _read_layout1(self) -> None:
        """Ids and metadata of a layout-1 file, read in chunks; the base64 payloads in the
        metadata move to :attr:`_legacy` (raw bytes) until the next save writes them out."""
        with zipfile.ZipFile(self.file) as zf:
            self._ids = _Strings.of([rid for rows in _npy_rows(zf, "ids") for rid in rows])
            self._meta = _Strings.of([])
            label = 0
            for rows in _npy_rows(zf, "metadata"):
                for text in rows:
                    if PAYLOAD_KEY in text:
                        meta = json.loads(text)
                        raw = meta.pop(PAYLOAD_KEY, None)
                        blob = _decode_payload(self._ids[label], raw)
                        if blob is not None:
                            self._legacy[label] = blob
                        text = json.dumps(meta)
                    self._meta.append(text)
                    label += 1
        if len(self._meta) != len(self._ids):
            raise ValueError("ids and metadata differ in length")
        self._pos = np.full((len(self._ids), 2), -1, dtype=np.int64)

    @property
    def _labels(self) -> _IdLabels:
        """Record id -> FAISS label, built on first use (writes and fetches by id)."""
        if self._label_map is None:
            self._label_map = _IdLabels(self._ids)
        return self._label_map

    def _label_array(self) -> NDArray[np.int64]:
        idmap = self._faiss.downcast_index(self._index)
        return np.asarray(self._faiss.vector_to_array(idmap.id_map), dtype=np.int64)

    def _collection_names(self) -> list[str]:
        return [p.name[: -len(self.suffix)] for p in self.path.glob(f"*{self.suffix}")]

    def _create(self, dim: int) -> None:
        faiss = self._faiss
        try:
            self._index = faiss.index_factory(
                dim, f"IDMap2,{self.factory}", faiss.METRIC_INNER_PRODUCT
            )
        except RuntimeError as exc:
            raise ValueError(
                f"bad FAISS factory {self.factory!r}: {str(exc).splitlines()[0]}"
            ) from None
        self._present = np.zeros(0, dtype=bool)
        self._info["factory"] = self.factory
        self._dirty = True

    def _write_info(self) -> None:
        self._dirty = True

    def _prep(self, X: NDArray[np.float32]) -> NDArray[np.float32]:
        if self.metric == "cosine":
            norms = np.linalg.norm(X, axis=1, keepdims=True)
            return np.ascontiguousarray(X / np.where(norms > 0, norms, 1.0), dtype=np.float32)
        return np.ascontiguousarray(X, dtype=np.float32)

    def _upsert(self, batch: _Batch) -> None:
        ids, X, metadata, payloads = batch
        metas = [json.dumps(m) if m else "{}" for m in metadata or [{}] * len(ids)]
        labels = self._labels.get(ids)
        new = np.flatnonzero(labels < 0)
        kept = np.flatnonzero(labels >= 0)
        if new.size:  # new ids get the next labels, in the order of the call
            labels[new] = len(self._ids) + np.arange(new.size)
            fresh = [ids[j] for j in new.tolist()]
            self._ids.extend(fresh)
            self._labels.add(fresh, labels[new])
            self._meta.extend([metas[j] for j in new.tolist()])
        grow = len(self._ids) - self._present.size
        if grow > 0:
            self._present = np.concatenate([self._present, np.zeros(grow, dtype=bool)])
        known = labels[kept]
        replace = known[self._present[known]]  # held records: their vectors are replaced
        grow = len(self._ids) - self._pos.shape[0]
        if grow > 0:
            self._pos = np.concatenate([self._pos, np.full((grow, 2), -1, dtype=np.int64)])
        if replace.size:
            try:
                self._index.remove_ids(replace)
            except RuntimeError:
                raise ValueError(
                    f"FAISS index {self.factory!r} cannot replace existing ids "
                    f"(e.g. {self._ids[int(replace[0])]!r}); use factory='Flat' or new ids."
                ) from None
        if self._index.ntotal == 0 and not self._index.is_trained:
            raise ValueError(
                f"FAISS index {self.factory!r} needs training; use an index that does not "
                "(e.g. 'Flat' or 'HNSW32')."
            )
        self._index.add_with_ids(self._prep(X), labels)
        self._present[labels] = True
        # a replaced record's metadata and payload are replaced too (none given: none kept)
        old = self._pos[labels, 1]
        self._garbage += int(old[old > 0].sum())
        for lab in labels.tolist():
            self._legacy.pop(lab, None)
        if payloads is None:
            self._pos[labels] = -1
        else:
            self._pos[labels] = self._append(payloads)
        for j, label in zip(kept.tolist(), known.tolist(), strict=True):
            if self._meta[label] != metas[j]:  # unchanged metadata keeps the list packed
                self._meta[label] = metas[j]
        self._dirty = True

    def _append(self, blobs: list[bytes]) -> NDArray[np.int64]:
        """Append payloads to the payload file (created on first use); their (offset, length)."""
        if self._pfh is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._pfile = self.path / f"{self.collection}.faiss.{secrets.token_hex(8)}.payloads"
            self._pfh = self._pfile.open("x+b")
        end = self._pfh.seek(0, os.SEEK_END)
        lens = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        self._pfh.write(b"".join(blobs))
        self._unflushed = True
        pos = np.empty((len(blobs), 2), dtype=np.int64)
        pos[:, 1] = lens
        pos[:, 0] = end + np.cumsum(lens) - lens
        return pos

    def _reader(self) -> int:
        """The payload file's descriptor, its appended bytes flushed (reads use ``pread``: a
        memory map would count every page the kernel maps around a read -- 64 kB for each
        1.6 kB payload -- in the process' RSS until the whole file is resident)."""
        assert self._pfh is not None
        if self._unflushed:
            self._pfh.flush()
            self._unflushed = False
        return int(self._pfh.fileno())

    def _read(self, labels: Sequence[int]) -> list[bytes | None]:
        """The payloads of FAISS labels, in order (one ``pread`` each)."""
        if not labels:
            return []
        pos = self._pos[np.asarray(labels, dtype=np.int64)].tolist()
        fd = self._reader() if self._pfh is not None else -1
        legacy, pread = self._legacy, os.pread
        out: list[bytes | None] = []
        for lab, (o, n) in zip(labels, pos, strict=True):
            if n >= 0:
                blob = pread(fd, n, o)
                if len(blob) != n:
                    raise DataError(
                        f"the payload file {self._pfile} ends before the payload of record "
                        f"{self._ids[lab]!r} (truncated?)."
                    )
                out.append(blob)
            else:
                out.append(legacy.get(lab) if legacy else None)
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        labels = self._labels.get(ids).tolist()
        present = [lab for lab in labels if lab >= 0 and self._present[lab]]
        got = dict(zip(present, self._read(present), strict=True))
        return [got.get(lab) for lab in labels]

    def _records(self, labels: list[int]) -> tuple[list[str], list[dict[str, Any]]]:
        """The ids and metadata of FAISS labels (hits): decoded for those labels only."""
        metas = [{} if m == "{}" else json.loads(m) for m in self._meta.take(labels)]
        return self._ids.take(labels), metas

    def _search(
        self, Q: NDArray[np.float32], k: int, with_vectors: bool, with_payloads: bool
    ) -> list[list[Hit]]:
        with _faiss_threads(self._faiss, Q.shape[0]), self._search_depth(k):
            D, I = self._index.search(self._prep(Q), k)  # noqa: E741 - FAISS's name
        payload: dict[int, bytes | None] = {}
        if with_payloads:
            found = I[I >= 0].tolist()
            payload = dict(zip(found, self._read(found), strict=True))
        out: list[list[Hit]] = []
        for drow, irow in zip(D.tolist(), I.tolist(), strict=True):
            labels = [lab for lab in irow if lab >= 0]  # FAISS pads short answers with -1
            scores = [sc for sc, lab in zip(drow, irow, strict=True) if lab >= 0]
            ids, metas = self._records(labels)
            vecs: list[NDArray[np.float32] | None] = [None] * len(labels)
            if with_vectors:
                vecs = [np.asarray(self._index.reconstruct(lab), np.float32) for lab in labels]
            get = payload.get
            out.append([
                Hit(rid, sc, meta, vec, get(lab))
                for rid, sc, meta, vec, lab in zip(ids, scores, metas, vecs, labels, strict=True)
            ])  # fmt: skip
        return out

    # ---- a re-rank's candidates, as arrays ------------------------------------------------------
    @property
    def approximate(self) -> bool:
        """Whether the index searches approximately (HNSW): its recall of the exact top k' is
        then measured (:meth:`search_recall`) and folded into the k' of a re-rank."""
        return self._hnsw() is not None

    def _hnsw(self) -> Any:
        """The HNSW graph of the index (``None``: an exact index)."""
        if self._index is None:
            return None
        inner = self._faiss.downcast_index(self._faiss.downcast_index(self._index).index)
        return getattr(inner, "hnsw", None)

    @contextlib.contextmanager
    def _search_depth(self, k: int) -> Iterator[None]:
        """An HNSW index searched with ``efSearch`` set from the depth ``k``
        (:data:`HNSW_EF_FACTOR` times k, at least :data:`HNSW_EF_MIN`), restored afterwards."""
        graph = self._hnsw()
        if graph is None:
            yield
            return
        before = graph.efSearch
        graph.efSearch = max(HNSW_EF_MIN, int(np.ceil(self.ef_factor * k)))
        try:
            yield
        finally:
            graph.efSearch = before

    @property
    def ef_factor(self) -> float:
        """efSearch per unit of depth of an HNSW index (the store's info ``ef_factor``, else
        :data:`HNSW_EF_FACTOR`)."""
        return float(self._info.get("ef_factor", HNSW_EF_FACTOR))

    def _candidates(self, Q: NDArray[np.float32], k: int) -> Candidates:
        with _faiss_threads(self._faiss, Q.shape[0]), self._search_depth(k):
            D, I = self._index.search(self._prep(Q), k)  # noqa: E741 - FAISS's name
        found = I >= 0  # FAISS pads short answers with -1
        keys, inv = np.unique(I[found], return_inverse=True)
        rows = np.full(I.shape, -1, dtype=np.int64)
        rows[found] = inv
        scores = np.where(found, D, -np.inf).astype(np.float32)
        return Candidates(rows, scores, keys.astype(np.int64))

    def payload_block(self, candidates: Candidates) -> tuple[bytes | memoryview, NDArray[np.int64]]:
        """The candidates' payloads read through one memory map of the payload file, in file
        order, a gather per payload length (one for payloads of vectors alone, which all have
        one length): no read call per payload. The map lives for the call only, so a search
        does not keep the pages it read in its memory."""
        self._check_open()
        if candidates.hits is not None:
            return super().payload_block(candidates)
        labels = candidates.keys
        if self._legacy or self._pfh is None:  # payloads of a layout-1 file, until saved
            return _joined([b or b"" for b in self._read(labels.tolist())])
        pos = self._pos[labels]
        lens = np.where(pos[:, 1] >= 0, pos[:, 1], 0)
        off = np.zeros(labels.size + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        fd = self._reader()
        size = os.fstat(fd).st_size
        over = np.flatnonzero(pos[:, 0] + lens > size)
        if over.size:
            raise DataError(
                f"the payload file {self._pfile} ends before the payload of record "
                f"{self._ids[int(labels[over[0]])]!r} (truncated?)."
            )
        out = np.empty(int(off[-1]), dtype=np.uint8)
        # a map counts the pages it touches in the process' memory while it lives (about two
        # of 4 kB a payload): at most PAYLOAD_MAP_CHUNK payloads are read through one map, the
        # next chunk further on in the file through the next
        rows = np.flatnonzero(lens > 0)
        rows = rows[np.argsort(pos[rows, 0], kind="stable")]
        for c in range(0, rows.size, PAYLOAD_MAP_CHUNK):
            part = rows[c : c + PAYLOAD_MAP_CHUNK]
            first = int(pos[part[0], 0]) // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
            last = int((pos[part, 0] + lens[part]).max())
            with mmap.mmap(fd, last - first, offset=first, access=mmap.ACCESS_READ) as mm:
                mm.madvise(mmap.MADV_RANDOM)  # no read-ahead around each payload
                _gather(mm, pos[part, 0] - first, lens[part], off[part], out)
        return out.data, off  # the gathered bytes themselves (a memoryview), not a copy

    def candidate_ids(self, candidates: Candidates) -> list[str]:
        self._check_open()
        if candidates.hits is not None:
            return super().candidate_ids(candidates)
        return self._ids.take(candidates.keys.tolist())

    def candidate_hits(
        self, candidates: Candidates, keys: Sequence[int], scores: Sequence[float]
    ) -> list[Hit]:
        self._check_open()
        if candidates.hits is not None:
            return super().candidate_hits(candidates, keys, scores)
        labels = candidates.keys[np.asarray(keys, dtype=np.int64)].tolist()
        ids, metas = self._records(labels)
        return [Hit(rid, float(sc), meta) for rid, sc, meta in zip(ids, scores, metas, strict=True)]

    def search_recall(self, vectors: Any, k: int) -> float:
        """Mean share of each query's exact top ``k`` (by the stored vectors, scanned in
        chunks) that the index's search returns at depth ``k``: 1 for an exact index.

        What a re-rank loses to an approximate index beyond what the noise costs; the k' of
        ``--recall`` divides its target by it (:meth:`ProtectedCollection.query
        <privembed.integrations.collection.ProtectedCollection.query>`).
        """
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        n = self.count()
        if self._hnsw() is None or n == 0:
            return 1.0
        k = min(k, n)
        Qp = self._prep(np.ascontiguousarray(Q, dtype=np.float32))
        got = self._candidates(Qp, k)
        found = np.where(got.rows >= 0, got.keys[np.maximum(got.rows, 0)], -1)
        idmap = self._faiss.downcast_index(self._index)
        inner = self._faiss.downcast_index(idmap.index)
        labels = self._label_array()
        best_s = np.full((Qp.shape[0], 0), -np.inf, dtype=np.float32)
        best_l = np.zeros((Qp.shape[0], 0), dtype=np.int64)
        step = max(1024, (32 << 20) // (4 * inner.d))  # about 32 MiB of vectors at a time
        for s in range(0, n, step):
            C = inner.reconstruct_n(s, min(step, n - s))
            S = np.concatenate([best_s, Qp @ C.T], axis=1)
            L = np.concatenate([best_l, np.broadcast_to(labels[s : s + C.shape[0]], (Qp.shape[0], C.shape[0]))], axis=1)  # fmt: skip
            top = np.argpartition(-S, k - 1, axis=1)[:, :k] if S.shape[1] > k else np.argsort(-S, axis=1)  # fmt: skip
            best_s = np.take_along_axis(S, top, axis=1)
            best_l = np.take_along_axis(L, top, axis=1)
        hit = [np.isin(e, f).mean() for e, f in zip(best_l, found, strict=True)]
        return float(np.mean(hit))

    def _all_ids(self) -> list[str]:
        return self._ids.take(np.flatnonzero(self._present[: len(self._ids)]).tolist())

    def _count(self) -> int:
        return int(self._index.ntotal)

    def _rewrite_payloads(self) -> Path | None:
        """Copy every live payload into a new payload file, in label order, a chunk at a time;
        returns the old file (to delete once the index file that no longer refers to it is in
        place)."""
        old_fd = self._reader() if self._pfh is not None else -1
        old_pos, legacy = self._pos, self._legacy
        old_file, old_fh = self._pfile, self._pfh
        self._pfile, self._pfh, self._unflushed = None, None, False
        self._pos = np.full((len(self._ids), 2), -1, dtype=np.int64)
        live = np.flatnonzero(self._present[: len(self._ids)])
        step = 4096
        for s in range(0, live.size, step):
            labs, blobs = [], []
            for lab, (o, n) in zip(live[s : s + step].tolist(), old_pos[live[s : s + step]]
                                   .tolist(), strict=True):  # fmt: skip
                blob = os.pread(old_fd, n, o) if n >= 0 else legacy.get(lab)
                if blob is not None:
                    labs.append(lab)
                    blobs.append(blob)
            if blobs:
                self._pos[np.asarray(labs, dtype=np.int64)] = self._append(blobs)
        self._legacy = {}
        self._garbage = 0
        if old_fh is not None:
            old_fh.close()
        return old_file

    def save(self) -> None:
        """Write the index file atomically (no-op if nothing changed); payloads appended since
        the last save are flushed to disk first."""
        if not self._dirty or self._index is None:
            return
        self._write(rewrite=bool(self._legacy) or self._too_much_garbage())

    def _too_much_garbage(self) -> bool:
        if self._pfh is None:
            return False
        size = os.fstat(self._pfh.fileno()).st_size
        return self._garbage > max(size // 2, self.compact_after_bytes)

    def compact(self) -> None:
        """Rewrite the payload file with only the payloads records refer to, and the index file
        in the current layout (converts a store written by an earlier privembed)."""
        self._check_open()
        if self._index is None:
            return
        self._write(rewrite=True)

    def _write(self, *, rewrite: bool) -> None:
        from ..data.io import atomic_output

        self.path.mkdir(parents=True, exist_ok=True)
        old = self._rewrite_payloads() if rewrite else None
        if self._pfh is not None:
            self._pfh.flush()
            os.fsync(self._pfh.fileno())
            self._unflushed = False
        ids, ids_off = self._ids.arrays()
        meta, meta_off = self._meta.arrays()
        arrays = {
            "layout": np.array(FAISS_LAYOUT),
            "ids": ids,
            "ids_off": ids_off,
            "meta": meta,
            "meta_off": meta_off,
            "payload_pos": self._pos,
            "payload_file": np.array("" if self._pfile is None else self._pfile.name),
            "info": np.array(self._info_json()),
        }
        with atomic_output(self.file) as tmp, zipfile.ZipFile(tmp, "w") as zf:
            for name, arr in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, arr, allow_pickle=False)
            with zf.open(_INDEX_MEMBER, "w", force_zip64=True) as fh:  # streamed, no copy
                self._faiss.write_index(self._index, self._faiss.PyCallbackIOWriter(fh.write))
        self._dirty = False
        self._layout = FAISS_LAYOUT
        if old is not None and old != self._pfile:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def _close_files(self) -> None:
        if getattr(self, "_pfh", None) is not None:
            self._pfh.close()
            self._pfh = None

    def close(self) -> None:
        if not self._closed:
            try:
                if getattr(self, "_index", None) is not None:
                    self.save()
            finally:
                self._close_files()
        super().close()
