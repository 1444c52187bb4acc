"""A protected collection: protect on the way into a vector store, treat queries on the way out.

:class:`ProtectedCollection` joins a :class:`~privembed.integrations.stores.VectorStore`, a
mechanism and its query-side treatment (:mod:`privembed.integrations.query`):

* :meth:`~ProtectedCollection.add` protects embeddings (keyed noise when a key is given, the
  same bits ``privembed protect`` would write) and upserts the releases;
* :meth:`~ProtectedCollection.add_released` upserts vectors that were protected elsewhere
  (a file written by ``privembed protect``), under the configuration recorded with them;
* :meth:`~ProtectedCollection.query` and :meth:`~ProtectedCollection.query_texts` apply the
  treatment the collection's mechanism requires and return hits, best first.

The collection records the mechanism configuration, the guarantee, the key id and the embedding
model in the store's metadata, so a later process (``privembed search``) can query it correctly
with nothing but the store path, and refuses to mix vectors of different mechanisms or models in
one collection (their scores would not be comparable).

Ledger: with a :class:`~privembed.ledger.Ledger`, every :meth:`~ProtectedCollection.add` is one
release, budget-checked before anything is sent and recorded *before* the upsert -- a store
upsert is not atomic, so a failure part-way over-counts (the safe direction) rather than leaving
released vectors unrecorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError, check_embeddings, check_int
from ..mechanisms import Mechanism
from ..release import Release
from ..rng import as_generator
from .query import QueryTreatment, query_treatment
from .stores import Hit, VectorStore

__all__ = ["ProtectedCollection", "index_file"]


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


class ProtectedCollection:
    """A vector-store collection whose vectors are protected by one mechanism.

    Parameters
    ----------
    store : VectorStore
        An open store. For a new collection its ``metric`` must be the one the treatment needs
        (use :meth:`open`, which picks it).
    mechanism : Mechanism, "none" or None
        The mechanism for new vectors. ``None`` adopts the collection's stored configuration
        (query-only use, or :meth:`add_released`). ``"none"`` indexes plain, unprotected vectors.
    key : bytes, optional
        Secret key for keyed noise (ids then required in :meth:`add`).
    rng : int, numpy.random.Generator or None
        Randomness without a key.
    embedding_model : str, optional
        Model that produced the embeddings (recorded; :meth:`query_texts` uses it).
    protection : dict, optional
        Protection metadata of vectors protected elsewhere (``privembed protect`` output); used
        with ``mechanism=None`` for a new collection.

    Examples
    --------
    >>> import tempfile
    >>> from privembed import get_mechanism
    >>> X = np.eye(4)
    >>> mech = get_mechanism("gaussian", epsilon=1e6, delta=1e-5)  # almost no noise
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with ProtectedCollection.open("faiss", tmp, "demo", mechanism=mech, key=b"k" * 32) as col:
    ...         Y = col.add(["a", "b", "c", "d"], X)   # the released vectors
    ...         [h.id for h in col.query(X[2], k=2)[0]][0]
    'c'
    """

    def __init__(
        self,
        store: VectorStore,
        *,
        mechanism: Mechanism | str | None = None,
        key: bytes | None = None,
        rng: Any = None,
        embedding_model: str | None = None,
        protection: dict[str, Any] | None = None,
    ) -> None:
        self.store = store
        stored = store.info.get("protection")
        if isinstance(mechanism, str):
            if mechanism != "none":
                raise ValueError(
                    f"mechanism must be a Mechanism, 'none' or None, got mechanism={mechanism!r}."
                )
            protection = {"protected": False}
            self.mechanism: Mechanism | None = None
        elif isinstance(mechanism, Mechanism):
            self.mechanism = mechanism
            protection = None  # computed by the protector below
        elif mechanism is None:
            self.mechanism = None
            if protection is None:
                if stored is None:
                    raise ValueError(
                        f"collection {store.collection!r} is new or holds no privembed "
                        "protection record; give a mechanism (or 'none' for plain vectors)."
                    )
                protection = stored
        else:
            raise TypeError(
                f"mechanism must be a Mechanism, 'none' or None, got mechanism={mechanism!r}."
            )
        self.key = key
        # one generator across adds: seeded adds never repeat each other's noise
        self._rng = None if rng is None else as_generator(rng)
        if self.mechanism is not None:
            probe = Release(self.mechanism, key=key, rng=0 if rng is not None else None)
            protection = probe.metadata()
            probe.close()
            self.key = probe.key
        elif key is not None or rng is not None:
            raise ValueError("key and rng apply only when a mechanism protects new vectors.")
        assert protection is not None
        self.protection = protection
        config = protection.get("mechanism") if protection.get("protected") else None
        if protection.get("protected") and not isinstance(config, dict):
            raise ValueError("protection metadata has no mechanism configuration.")
        self.treatment: QueryTreatment = query_treatment(config)
        if stored is not None:
            self._check_compatible(stored, embedding_model)
            self.embedding_model = store.info.get("embedding_model")
        else:
            self.embedding_model = embedding_model
        if store.metric != self.treatment.metric:
            raise ValueError(
                f"collection {store.collection!r} uses metric {store.metric!r} but "
                f"{self._describe(protection)} needs {self.treatment.metric!r}."
            )

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        store: str,
        path: Any,
        collection: str = "privembed",
        *,
        mechanism: Mechanism | str | None = None,
        protection: dict[str, Any] | None = None,
        create: bool = True,
        store_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ProtectedCollection:
        """Open a store of kind ``store`` with the metric the mechanism's treatment needs."""
        from .stores import open_store

        metric = None
        if isinstance(mechanism, Mechanism):
            metric = query_treatment(mechanism).metric
        elif mechanism == "none":
            metric = query_treatment(None).metric
        elif protection is not None:
            cfg = protection.get("mechanism") if protection.get("protected") else None
            metric = query_treatment(cfg).metric
        s = open_store(
            store, path, collection, metric=metric, create=create, **(store_options or {})
        )
        try:
            return cls(s, mechanism=mechanism, protection=protection, **kwargs)
        except BaseException:
            s.close()
            raise

    @staticmethod
    def _describe(protection: dict[str, Any]) -> str:
        if not protection.get("protected"):
            return "unprotected vectors"
        cfg = protection.get("mechanism") or {}
        return f"mechanism {cfg.get('mechanism', '?')!r}"

    def _check_compatible(self, stored: dict[str, Any], model: str | None) -> None:
        new, old = self.protection, stored
        if bool(new.get("protected")) != bool(old.get("protected")) or _canon(
            new.get("mechanism")
        ) != _canon(old.get("mechanism")):
            raise ValueError(
                f"collection {self.store.collection!r} holds vectors from "
                f"{self._describe(old)} ({old.get('guarantee_text', 'no guarantee')}); these "
                f"are from {self._describe(new)} with a different configuration -- mixing them "
                "makes scores incomparable; use another collection."
            )
        old_model = self.store.info.get("embedding_model")
        if model is not None and old_model is not None and model != old_model:
            raise ValueError(
                f"collection {self.store.collection!r} holds embeddings of model "
                f"{old_model!r}, not {model!r}; use another collection."
            )

    def _record_info(self, dim_in: int | None) -> None:
        if self.store.info.get("protection") is not None:
            return
        self.store.update_info(
            protection=self.protection,
            embedding_model=self.embedding_model,
            dim_in=None if dim_in is None else int(dim_in),
            query_treatment=self.treatment.description,
        )

    # ---- writing ---------------------------------------------------------------------------
    def add(
        self,
        ids: Sequence[Any],
        X: Any,
        metadata: Any = None,
        *,
        ledger: Any = None,
        row_offset: int = 0,
    ) -> NDArray[Any]:
        """Protect ``X`` (n, d) and upsert it under ``ids``; returns the released vectors.

        With ``mechanism="none"`` the vectors are upserted as they are. ``ledger`` (a
        :class:`~privembed.ledger.Ledger`) records the release before the upsert.

        Raises
        ------
        privembed.DataError
            Bad rows, ids or metadata.
        privembed.ledger.BudgetExceeded
            The ledger's per-record budget would be passed (nothing is sent).
        """
        id_list = list(ids)
        if self.mechanism is None:
            if self.protection.get("protected"):
                raise ValueError(
                    "this collection was opened without a mechanism; use add_released() for "
                    "vectors protected elsewhere, or open it with the mechanism."
                )
            Y, _ = check_embeddings(X, name="embeddings", row_offset=row_offset)
            dim_in = Y.shape[1]
        else:
            arr = np.asarray(X)
            dim_in = arr.shape[-1] if arr.ndim else 0
            with Release(
                self.mechanism,
                key=self.key,
                rng=self._rng,
                ledger=ledger,
                model=self.embedding_model,
                destination=f"{type(self.store).__name__}:{self.store.collection}",
                name="embeddings",
            ) as rel:
                Y = rel.protect(arr, id_list, row_offset=row_offset)
                rel.commit()  # the ledger records the release before anything is sent
                self._record_info(dim_in)
                self.store.upsert(id_list, Y, metadata)
            return Y
        self._record_info(dim_in)
        self.store.upsert(id_list, Y, metadata)
        return Y

    def add_released(
        self, ids: Sequence[Any], Y: Any, metadata: Any = None, *, dim_in: int | None = None
    ) -> None:
        """Upsert vectors already released under this collection's protection record."""
        arr, _ = check_embeddings(Y, name="released", allow_zero=True)
        if dim_in is None and self.treatment.kind == "none":
            dim_in = arr.shape[1]  # noise mechanisms keep the dimension
        self._record_info(dim_in)
        self.store.upsert(list(ids), arr, metadata)

    # ---- reading ---------------------------------------------------------------------------
    def query(self, Q: Any, k: int = 10) -> list[list[Hit]]:
        """Hits for plain query embeddings ``Q`` (nq, d) or (d,), after the query treatment.

        Scores are estimates of the clean cosine where the mechanism allows it
        (:meth:`QueryTreatment.score_scale`), raw cosines otherwise.
        """
        k = check_int("k", k, ge=1)
        d_in = self.store.info.get("dim_in")
        arr = np.asarray(Q)
        if d_in is not None and arr.ndim >= 1 and arr.shape[-1] != d_in:
            raise DataError(
                f"query has dimension {arr.shape[-1]} but the collection was built from "
                f"{d_in}-dimensional embeddings (dimension mismatch)."
            )
        Qt = self.treatment.apply(arr)
        hits = self.store.search(Qt[None, :] if Qt.ndim == 1 else Qt, k)
        d = int(d_in if d_in is not None else arr.shape[-1])
        scale = self.treatment.score_scale(d) if d >= 2 else 1.0
        if scale == 1.0:
            return hits
        return [[replace(h, score=h.score * scale) for h in hs] for hs in hits]

    def query_texts(
        self, texts: str | Sequence[str], k: int = 10, *, model: str | None = None
    ) -> list[list[Hit]]:
        """Embed ``texts`` with the collection's model (or ``model``) and :meth:`query`."""
        from ..embedders import Embedder

        name = model or self.embedding_model
        if name is None:
            raise ValueError(
                f"collection {self.store.collection!r} records no embedding model; pass the "
                "model that made its embeddings (--model)."
            )
        items = [texts] if isinstance(texts, str) else list(texts)
        return self.query(Embedder(name).encode(items), k)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> ProtectedCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
) -> dict[str, Any]:
    """Protect an embeddings file batch by batch and upsert it into a store (``privembed index``).

    ``mechanism=None`` indexes a file already protected by ``privembed protect`` under the
    configuration it records; ``"none"`` indexes plain vectors. Each batch is one release,
    recorded in the ``ledger`` before its upsert; record ids must be unique over the whole
    file (checked in bounded memory, so a second copy of an id is refused, not recorded free).

    Returns
    -------
    dict
        ``rows``, ``n``, ``total`` (vectors in the collection), ``treatment``, ``guarantee``.
    """
    from ..io import iter_batches
    from ..ledger import record_key
    from ..release import PROTECTION_KEYS, _IdSet

    input = Path(input)
    if not input.exists():
        raise FileNotFoundError(f"file not found: {input}")
    n, _dim, meta_in, batches = iter_batches(
        input, batch_rows=batch_rows, column=column, id_column=id_column
    )
    protected_in = bool(meta_in.get("protected"))
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
    elif protected_in and not allow_reprotect:
        raise ValueError(
            f"{input} is already protected ({meta_in.get('guarantee_text', 'unknown')}); "
            "omit --mechanism to index it as it is, or pass --allow-reprotect."
        )
    wanted = list(metadata_columns or [])
    emb_model = meta_in.get("embedding_model") or model
    protects = isinstance(mechanism, Mechanism)
    if ledger is not None and not protects:
        raise ValueError("--ledger records new releases; this input is not protected here.")
    needs_ids = key is not None or ledger is not None
    seen = _IdSet() if needs_ids else None
    rows = 0
    dim: int | None = _dim if _dim > 0 else None
    store_path = Path(path)
    created = not store_path.exists()
    try:
        with ProtectedCollection.open(
            store,
            path,
            collection,
            mechanism=mechanism,
            protection=(
                {k: meta_in[k] for k in PROTECTION_KEYS if k in meta_in}
                if mechanism is None
                else None
            ),
            key=key,
            rng=rng,
            embedding_model=emb_model,
        ) as col:
            for b in batches:
                if b.ids is not None:
                    ids = list(b.ids)
                elif needs_ids:
                    raise DataError(
                        f"{input} has no record ids; keyed noise and the ledger need an id "
                        "column (--id-column) in a Parquet, .npz or .jsonl file."
                    )
                else:
                    ids = list(range(b.start, b.start + b.num_rows))
                if seen is not None:
                    try:
                        seen.add([record_key(i) for i in ids])
                    except TypeError as exc:
                        raise DataError(f"{input}: {exc}") from None
                metas = None
                if wanted:
                    have = [] if b.extra is None else list(b.extra.schema.names)
                    missing = [c for c in wanted if c not in have]
                    if missing:
                        raise ValueError(
                            f"{input} has no column(s) {missing} for --metadata-column "
                            f"(other columns: {have or 'none'})."
                        )
                    cols = {c: b.extra.column(c).to_pylist() for c in wanted}
                    metas = [{c: cols[c][i] for c in wanted} for i in range(b.num_rows)]
                if mechanism is None:
                    col.add_released(ids, b.X, metas, dim_in=meta_in.get("dim"))
                else:
                    col.add(ids, b.X, metas, ledger=ledger, row_offset=b.start)
                rows += b.num_rows
                dim = int(b.X.shape[1])
            return {
                "rows": rows,
                "n": n,
                "dim": dim,
                "total": col.store.count(),
                "treatment": col.treatment.description,
                "guarantee": col.protection.get("guarantee_text", "none (unprotected)"),
            }
    except BaseException:
        if created and store_path.exists():  # a failed first index leaves no store behind
            import shutil

            shutil.rmtree(store_path, ignore_errors=True)
        raise
    finally:
        if seen is not None:
            seen.close()
