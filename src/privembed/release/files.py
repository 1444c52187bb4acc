"""Files as a source and a sink of a :class:`~privembed.release.core.Release`: an embeddings
file read batch by batch, or a file of texts embedded first, protected and written atomically,
renamed into place only inside the release's ledger commit."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int
from ..core.cancel import checkpoint, cooperative
from ..keys.keyed import text_digests
from ..keys.ledger import Ledger
from ..mechanisms.base import Mechanism
from .core import Release, ReleaseSummary
from .identity import refuse_variants
from .policy import (
    check_randomness,
    content_ids,
    open_ledger,
    refuse_protected,
    release_metadata,
)
from .steps import check_eraser, erased, erasure_metadata


@dataclass(frozen=True)
class _Settings:
    """What both sources of :func:`protect_file` share: the randomness, the ledger and its
    budgets, the subjects, the model, the pre-noise step, the output and progress -- one block,
    so the two paths cannot drift apart."""

    key: Any
    rng: Any
    generator: str | None
    ledger: str | Path | Ledger | None
    budget_epsilon: float | None
    budget_delta: float | None
    subject: str | None
    subject_budget: tuple[float | None, float | None]
    ledger_timeout: float
    on_wait: Callable[[Path], None] | None
    ids_from_content: bool
    model: str | None
    overwrite: bool
    keep_columns: Sequence[str]
    erase: Any
    subject_column: str | None
    on_start: Callable[[int], None] | None
    on_batch: Callable[[int], None] | None

    @property
    def needs_ids(self) -> bool:
        return self.key is not None or self.ledger is not None

    @contextlib.contextmanager
    def release(
        self, mechanism: Mechanism, src: Path, dst: Path, model: str | None
    ) -> Iterator[Release]:
        """The ledger opened (:func:`open_ledger`) and a :class:`Release` into ``dst`` over it."""
        with (
            open_ledger(
                self.ledger,
                budget_epsilon=self.budget_epsilon,
                budget_delta=self.budget_delta,
                subject_budget=self.subject_budget,
                on_wait=self.on_wait,
                timeout=self.ledger_timeout,
            ) as led,
            Release(
                mechanism,
                key=self.key,
                rng=self.rng,
                generator=self.generator,
                ledger=led,
                subject=self.subject,
                model=model,
                destination=str(dst.resolve()),
                name=src.name,
            ) as rel,
        ):
            yield rel


def _note_columns(rel: Release, kept: Sequence[str], dropped: Sequence[str], noun: str) -> None:
    """Name in the summary what left unprotected by request and what was dropped."""
    if kept:
        rel.summary.notes.append(f"kept as they are (not protected): {', '.join(kept)}")
    if dropped:
        rel.summary.notes.append(
            f"dropped {noun} {', '.join(dropped)} (not protected; keep one with --keep-field NAME)"
        )


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


def _check_request(
    src: Path,
    dst: Path,
    *,
    overwrite: bool,
    ids_from_content: bool,
    key: Any,
    rng: Any,
    ledger: Any,
) -> None:
    """Refuse a file release before anything is read or written: a key with a seed, a seed
    with a ledger (:func:`~privembed.release.check_randomness`), formats, a missing input, an
    existing output, content ids without a key."""
    from ..data import io

    check_randomness(key, rng, ledger=ledger, key_name="--key-file", rng_name="--seed")
    io.detect_format(dst)
    io.check_input_format(src)  # embeddings or texts: the message lists both
    if not src.exists():
        raise FileNotFoundError(f"file not found: {src}")
    if not overwrite and dst.exists():
        raise FileExistsError(f"output exists: {dst} (pass --overwrite to replace it).")
    if ids_from_content and key is None:
        content_ids(key=None)  # refused before anything is read or written


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

    ``ids_from_content`` names records without ids by their content, keyed
    (:func:`~privembed.release.content_ids`): texts equal up to case, whitespace and Unicode
    compatibility forms are one record, and with a ``ledger`` so are texts whose clean vectors
    are bit-identical, across commands (:mod:`privembed.release.identity`). Each exact text
    still gets noise of its own and is charged as a release of its record; rows of one file
    that are one record are refused, named.

    ``rng`` (a seed) is refused with a ``ledger`` (:func:`~privembed.release.check_randomness`).
    ``budget_epsilon``/``budget_delta`` (and the subject budget) may set a first budget or
    lower the stored one, never raise it; the change is written in the transaction that
    records this release, so a refused or failed release leaves the ledger as it was.

    Raises
    ------
    privembed.DataError, ValueError, FileNotFoundError, FileExistsError
        Bad input, parameters or destination -- before anything is written.
    privembed.keys.ledger.BudgetExceeded
        The ledger refused the release (nothing is published, the ledger is unchanged).
    """
    from ..data import io

    src, dst = Path(src), Path(dst)
    _check_request(
        src, dst, overwrite=overwrite, ids_from_content=ids_from_content, key=key, rng=rng,
        ledger=ledger,
    )  # fmt: skip
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    if subject_column is not None and ledger is None:
        raise ValueError("--subject-field charges subjects in the ledger: give --ledger.")
    settings = _Settings(
        key=key,
        rng=rng,
        generator=generator,
        ledger=ledger,
        budget_epsilon=budget_epsilon,
        budget_delta=budget_delta,
        subject=subject,
        subject_budget=(subject_budget_epsilon, subject_budget_delta),
        ledger_timeout=ledger_timeout,
        on_wait=on_wait,
        ids_from_content=ids_from_content,
        model=model,
        overwrite=overwrite,
        keep_columns=keep_columns,
        erase=check_eraser(eraser),
        subject_column=subject_column,
        on_start=on_start,
        on_batch=on_batch,
    )
    io.preload(src, dst)  # no lazy import runs once the output is open (core/cancel.py)
    checkpoint("command.start")
    if is_text_file(src, text_field=text_field):
        return _protect_texts_file(
            src, dst, mechanism, settings, text_field=text_field, id_field=id_column or "id",
            embedder=embedder,
        )  # fmt: skip
    return _protect_vectors_file(
        src, dst, mechanism, settings, column=column, id_column=id_column, batch_rows=batch_rows,
        allow_reprotect=allow_reprotect,
    )  # fmt: skip


def _protect_vectors_file(
    src: Path,
    dst: Path,
    mechanism: Mechanism,
    settings: _Settings,
    *,
    column: str | None,
    id_column: str | None,
    batch_rows: int,
    allow_reprotect: bool,
) -> ReleaseSummary:
    """An embeddings file, batch by batch: read, (erase,) protect, write; renamed into place in
    the ledger commit."""
    from ..data import io

    meta_in = io.read_metadata(src)
    refuse_protected(meta_in, src, allow=allow_reprotect)
    model_id = (
        settings.model
        or meta_in.get("embedding_model_identity")
        or meta_in.get("embedding_model")
        or meta_in.get("model")
    )
    with settings.release(mechanism, src, dst, model_id) as rel:

        def fn(batch: Any) -> NDArray[Any]:
            ids = batch.ids
            if ids is None and settings.ids_from_content and rel.needs_ids:
                ids = content_ids(key=rel.key, X=batch.X)  # the vectors as given, before erasure
            X = (
                batch.X
                if settings.erase is None
                else erased(settings.erase, batch.X, src.name, batch.start)
            )
            subjects = (
                None
                if settings.subject_column is None
                else _column_values(batch.extra, settings.subject_column, src.name)
            )
            return rel.protect(X, ids, row_offset=batch.start, subjects=subjects)

        def meta(m: dict[str, Any]) -> dict[str, Any]:
            _n, dim, _, _ = io.iter_batches(src, batch_rows=1, column=column, id_column=id_column)
            out = release_metadata(m, rel.metadata(dim if dim > 0 else None))
            if settings.erase is not None:
                out["concept_erasure"] = erasure_metadata(settings.erase)
            return out

        def started(n: int) -> None:
            rel.expect_rows(n)
            if settings.on_start is not None:
                settings.on_start(n)

        done = io.transform_file(
            src,
            dst,
            fn,
            metadata=meta,
            batch_rows=batch_rows,
            column=column,
            id_column=id_column,
            on_start=started,
            on_batch=settings.on_batch,
            commit=rel.commit,
            overwrite=settings.overwrite,
            keep_columns=settings.keep_columns,
        )
        checkpoint("publish.after", stop=False)  # complete: a late signal changes nothing
        rel.mark_published()
        _note_columns(rel, settings.keep_columns, done["dropped_columns"], "columns")
        rel.note_setting()
        return rel.summary


def is_text_file(path: str | Path, *, text_field: str = "text") -> bool:
    """Whether ``path`` holds texts (``.txt``, ``.csv``, JSONL or Parquet with a
    ``text_field`` and no embeddings) rather than embeddings (:func:`privembed.data.io.holds_texts`)."""
    from ..data.io import holds_texts

    return holds_texts(path, text_field=text_field)


def _read_texts(
    src: Path, dst: Path, text_field: str, id_field: str, keep_columns: Sequence[str]
) -> tuple[Any, list[str], list[str]]:
    """The texts' table, the fields to keep (checked against it and the output format) and
    its other fields."""
    from ..data import io

    table = io.read_text_table(src, text_field=text_field, id_field=id_field)
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
    return table, keep, others


def _embed(
    embedder: Any,
    texts: Sequence[str],
    on_start: Callable[[int], None] | None,
    on_batch: Callable[[int], None] | None,
) -> NDArray[Any]:
    """The texts' vectors, with progress from embedders that report it (a checkpoint per step)."""
    if on_start:
        on_start(len(texts))
    done = 0

    def progress(rows: int) -> None:  # the embedder counts rows so far; the bar, steps
        nonlocal done
        if on_batch and rows > done:
            on_batch(rows - done)
        done = max(done, rows)
        checkpoint("batch.read")

    if "on_progress" in inspect.signature(embedder.encode).parameters:
        X = embedder.encode(texts, on_progress=progress)
    else:
        X = np.asarray(embedder.encode(texts))
    if on_batch and done < len(texts):
        on_batch(len(texts) - done)
    return X


def _protect_texts_file(
    src: Path,
    dst: Path,
    mechanism: Mechanism,
    settings: _Settings,
    *,
    text_field: str,
    id_field: str,
    embedder: Any,
) -> ReleaseSummary:
    """A file of texts: embedded in one pass after the ledger's budget check, protected with the
    noise bound to each text, written atomically inside the ledger commit."""
    from ..data import io

    table, keep, others = _read_texts(src, dst, text_field, id_field, settings.keep_columns)
    ids, texts = table.ids, table.texts
    if ids is None and settings.needs_ids:
        if not settings.ids_from_content:
            raise DataError(
                f"{src.name}: keyed noise and the ledger need record ids, and these texts have "
                f"none (line numbers are not ids); add an {id_field!r} field (--id-field) or "
                "derive ids from the text (--ids-from-content)."
            )
        ids = content_ids(key=settings.key, texts=texts)
        refuse_variants(ids, where=src.name)  # before the model runs or the ledger opens
    if embedder is None:
        from ..data.embedders import Embedder

        embedder = Embedder(settings.model)
    emb_meta = embedder.metadata()
    # keyed noise is bound to what computes the vectors (a digest), never to a model's name;
    # embedders of the caller's own say what identifies them in their metadata
    model_id = str(
        emb_meta.get("embedding_model_identity")
        or emb_meta.get("model_id")
        or emb_meta.get("embedding_model")
    )
    subjects = (
        None
        if settings.subject_column is None
        else _column_values(table.columns, settings.subject_column, src.name)
    )
    erasure = None if settings.erase is None else erasure_metadata(settings.erase)
    with settings.release(mechanism, src, dst, model_id) as rel:
        # embedded after the ledger's budget check
        X = _embed(embedder, texts, settings.on_start, settings.on_batch)
        if settings.ids_from_content and table.ids is None:
            ids = rel.fold(X, ids)  # with a ledger: texts with one clean vector are one record
        digests = None
        if settings.key is not None:  # the noise is bound to the text and, with an eraser, to it
            digests = text_digests(texts, model_id)
            if erasure is not None:
                salt = erasure["digest"].encode()
                digests = [hashlib.sha256(salt + d).digest() for d in digests]
        if settings.erase is not None:
            X = erased(settings.erase, X, src.name, 0)
        Y = rel.protect(X, ids, digests=digests, subjects=subjects)
        io.write_embeddings(
            dst,
            Y,
            ids=ids,
            metadata={
                **emb_meta,
                **rel.metadata(X.shape[1]),
                **({} if erasure is None else {"concept_erasure": erasure}),
            },
            extra=table.columns.select(keep) if keep else None,
            src=src,
            commit=rel.commit,
            overwrite=settings.overwrite,
        )
        checkpoint("publish.after", stop=False)
        rel.mark_published()
        _note_columns(rel, keep, [c for c in others if c not in keep], "fields")
        rel.note_setting()
        return rel.summary
