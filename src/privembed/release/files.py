"""Files as a source and a sink of a release (:mod:`~privembed.release.flow`): an embeddings
file read batch by batch (:class:`VectorFile`), or a file of texts embedded first
(:class:`TextFile`), protected and written atomically (:class:`FileSink`), renamed into place
only inside the release's ledger commit."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int
from ..core.cancel import checkpoint, cooperative
from ..keys.keyed import resolve_key, text_digests
from ..keys.ledger import Ledger
from ..mechanisms.base import Mechanism
from .core import ReleaseSummary
from .flow import Batch, ReleaseRequest, Releases, publish
from .identity import refuse_variants
from .policy import content_ids, refuse_protected, release_metadata
from .steps import check_eraser, erased, erasure_metadata


def _note_columns(
    summary: ReleaseSummary, kept: Sequence[str], dropped: Sequence[str], noun: str
) -> None:
    """Name in the summary what left unprotected by request and what was dropped."""
    if kept:
        summary.notes.append(f"kept as they are (not protected): {', '.join(kept)}")
    if dropped:
        summary.notes.append(
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
    src: Path, dst: Path, request: ReleaseRequest, *, overwrite: bool, ids_from_content: bool
) -> None:
    """Refuse a file release before anything is read or written: a key with a seed, a seed
    with a ledger (:func:`~privembed.release.check_randomness`), formats, a missing input, an
    existing output, content ids without a key."""
    from ..data import io

    request.check(key_name="--key-file", rng_name="--seed")
    io.detect_format(dst)
    io.check_input_format(src)  # embeddings or texts: the message lists both
    if not src.exists():
        raise FileNotFoundError(f"file not found: {src}")
    if not overwrite and dst.exists():
        raise FileExistsError(f"output exists: {dst} (pass --overwrite to replace it).")
    if ids_from_content and request.key is None:
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
    request = ReleaseRequest(
        key=key, rng=rng, generator=generator, ledger=ledger, budget_epsilon=budget_epsilon,
        budget_delta=budget_delta, subject=subject,
        subject_budget=(subject_budget_epsilon, subject_budget_delta),
        ledger_timeout=ledger_timeout, on_wait=on_wait,
    )  # fmt: skip
    _check_request(src, dst, request, overwrite=overwrite, ids_from_content=ids_from_content)
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    if subject_column is not None and ledger is None:
        raise ValueError("--subject-field charges subjects in the ledger: give --ledger.")
    erase = check_eraser(eraser)
    io.preload(src, dst)  # no lazy import runs once the output is open (core/cancel.py)
    checkpoint("command.start")
    source: VectorFile | TextFile
    if is_text_file(src, text_field=text_field):
        source = TextFile(
            src, dst, request, text_field=text_field, id_field=id_column or "id",
            ids_from_content=ids_from_content, model=model, embedder=embedder,
            keep_columns=keep_columns, erase=erase, subject_column=subject_column,
            on_start=on_start, on_batch=on_batch,
        )  # fmt: skip
    else:
        source = VectorFile(
            src, request, column=column, id_column=id_column, batch_rows=batch_rows,
            ids_from_content=ids_from_content, model=model, allow_reprotect=allow_reprotect,
            erase=erase, subject_column=subject_column,
        )  # fmt: skip
    sink = FileSink(
        dst, overwrite=overwrite, keep_columns=keep_columns, on_start=on_start, on_batch=on_batch
    )
    summary = publish(source, sink, mechanism, request).summary
    assert summary is not None
    return summary


class VectorFile:
    """An embeddings file as a source: its batches (:func:`privembed.data.io.iter_batches`),
    with ids derived from the content on request, a pre-noise step and per-record subjects.

    Refused before any work: an input already protected (unless ``allow_reprotect``)."""

    def __init__(
        self,
        path: Path,
        request: ReleaseRequest,
        *,
        column: str | None,
        id_column: str | None,
        batch_rows: int,
        ids_from_content: bool,
        model: str | None,
        allow_reprotect: bool,
        erase: Any,
        subject_column: str | None,
    ) -> None:
        from ..data import io

        self.path, self.name, self.request = path, path.name, request
        self.column, self.id_column, self.batch_rows = column, id_column, batch_rows
        self.ids_from_content, self.erase, self.subject_column = (
            ids_from_content,
            erase,
            subject_column,
        )
        self._key = None if request.key is None else resolve_key(request.key)
        meta_in = io.read_metadata(path)
        refuse_protected(meta_in, path, allow=allow_reprotect)
        self.model: str | None = (
            model
            or meta_in.get("embedding_model_identity")
            or meta_in.get("embedding_model")
            or meta_in.get("model")
        )

    def batch(self, b: Any) -> Batch:
        """The release's batch of one :class:`privembed.data.io.Batch` of the file."""
        ids = b.ids
        if ids is None and self.ids_from_content and self.request.needs_ids:
            ids = content_ids(key=self._key, X=b.X)  # the vectors as given, before erasure
        X = b.X if self.erase is None else erased(self.erase, b.X, self.name, b.start)
        subjects = (
            None
            if self.subject_column is None
            else _column_values(b.extra, self.subject_column, self.name)
        )
        return Batch(X, ids, start=b.start, subjects=subjects)

    def batches(self) -> Iterator[Batch]:
        from ..data.io import iter_batches

        _n, _dim, _meta, raw = iter_batches(
            self.path, batch_rows=self.batch_rows, column=self.column, id_column=self.id_column
        )
        return (self.batch(b) for b in raw)

    def dim(self) -> int | None:
        """The vectors' dimension (None for an empty file)."""
        from ..data.io import iter_batches

        _n, dim, _, _ = iter_batches(
            self.path, batch_rows=1, column=self.column, id_column=self.id_column
        )
        return dim if dim > 0 else None

    def metadata(self, meta_in: dict[str, Any], protection: dict[str, Any]) -> dict[str, Any]:
        """The output's metadata: the input's (``meta_in``), this release's and the erasure's."""
        out = release_metadata(meta_in, protection)
        if self.erase is not None:
            out["concept_erasure"] = erasure_metadata(self.erase)
        return out


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


class TextFile:
    """A file of texts as a source: one batch, embedded after the ledger's budget check, its
    noise bound to each text (and to a pre-noise step), its ids given or derived from the text
    (folded, with a ledger, over texts with one clean vector).

    Refused before the model runs or the ledger opens: fields to keep that the file lacks, ids
    missing where keyed noise or the ledger needs them, variants of one text given twice."""

    def __init__(
        self,
        path: Path,
        dst: Path,
        request: ReleaseRequest,
        *,
        text_field: str,
        id_field: str,
        ids_from_content: bool,
        model: str | None,
        embedder: Any,
        keep_columns: Sequence[str],
        erase: Any,
        subject_column: str | None,
        on_start: Callable[[int], None] | None,
        on_batch: Callable[[int], None] | None,
    ) -> None:
        self.path, self.name, self.request, self.erase = path, path.name, request, erase
        self.on_start, self.on_batch = on_start, on_batch
        self.table, self.keep, self.others = _read_texts(
            path, dst, text_field, id_field, keep_columns
        )
        ids, texts = self.table.ids, self.table.texts
        self.fold = ids is None and ids_from_content
        if ids is None and request.needs_ids:
            if not ids_from_content:
                raise DataError(
                    f"{path.name}: keyed noise and the ledger need record ids, and these texts "
                    f"have none (line numbers are not ids); add an {id_field!r} field "
                    "(--id-field) or derive ids from the text (--ids-from-content)."
                )
            ids = content_ids(key=request.key, texts=texts)
            refuse_variants(ids, where=path.name)  # before the model runs or the ledger opens
        self.ids = ids
        if embedder is None:
            from ..data.embedders import Embedder

            embedder = Embedder(model)
        self.embedder = embedder
        self.emb_meta = embedder.metadata()
        # keyed noise is bound to what computes the vectors (a digest), never to a model's
        # name; embedders of the caller's own say what identifies them in their metadata
        self.model_id = str(
            self.emb_meta.get("embedding_model_identity")
            or self.emb_meta.get("model_id")
            or self.emb_meta.get("embedding_model")
        )
        self.model: str | None = self.model_id
        self.subjects = (
            None
            if subject_column is None
            else _column_values(self.table.columns, subject_column, path.name)
        )
        self.erasure = None if erase is None else erasure_metadata(erase)

    def batches(self) -> Iterator[Batch]:
        """The texts' one batch, embedded now (after the ledger's budget check)."""
        texts = self.table.texts
        X = _embed(self.embedder, texts, self.on_start, self.on_batch)
        digests = None
        if self.request.key is not None:  # the noise is bound to the text and to an eraser
            digests = text_digests(texts, self.model_id)
            if self.erasure is not None:
                salt = self.erasure["digest"].encode()
                digests = [hashlib.sha256(salt + d).digest() for d in digests]
        if self.erase is not None:
            X = erased(self.erase, X, self.name, 0)
        yield Batch(X, self.ids, digests=digests, subjects=self.subjects, fold=self.fold)

    def metadata(self, protection: dict[str, Any]) -> dict[str, Any]:
        """The output's metadata: the embedder's, this release's and the erasure's."""
        erasure = {} if self.erasure is None else {"concept_erasure": self.erasure}
        return {**self.emb_meta, **protection, **erasure}


class FileSink:
    """A file as a sink: written to a temporary file and renamed into place inside the
    release's commit hook (:func:`privembed.data.io.atomic_output`, signals held), one release
    for the whole file. A vectors file is read and written in one pass
    (:func:`privembed.data.io.transform_file`, kept columns copied beside the ids); texts are
    written whole (:func:`privembed.data.io.write_embeddings`)."""

    per_batch = False

    def __init__(
        self,
        path: Path,
        *,
        overwrite: bool,
        keep_columns: Sequence[str],
        on_start: Callable[[int], None] | None,
        on_batch: Callable[[int], None] | None,
    ) -> None:
        self.path, self.overwrite, self.keep_columns = path, overwrite, keep_columns
        self.on_start, self.on_batch = on_start, on_batch
        self.destination = str(path.resolve())

    def run(self, source: Any, releases: Releases) -> None:
        if isinstance(source, VectorFile):
            kept, dropped, noun = self._stream(source, releases)
        else:
            kept, dropped, noun = self._whole(source, releases)
        checkpoint("publish.after", stop=False)  # complete: a late signal changes nothing
        releases.published()
        assert releases.summary is not None
        _note_columns(releases.summary, kept, dropped, noun)
        releases.note_setting()

    def _stream(
        self, source: VectorFile, releases: Releases
    ) -> tuple[Sequence[str], list[str], str]:
        from ..data import io

        def started(n: int) -> None:
            releases.release().expect_rows(n)
            if self.on_start is not None:
                self.on_start(n)

        done = io.transform_file(
            source.path,
            self.path,
            lambda b: releases.protect(source.batch(b)),
            metadata=lambda m: source.metadata(m, releases.metadata(source.dim())),
            batch_rows=source.batch_rows,
            column=source.column,
            id_column=source.id_column,
            on_start=started,
            on_batch=self.on_batch,
            commit=releases.commit,
            overwrite=self.overwrite,
            keep_columns=self.keep_columns,
        )
        return self.keep_columns, done["dropped_columns"], "columns"

    def _whole(self, source: TextFile, releases: Releases) -> tuple[Sequence[str], list[str], str]:
        from ..data import io

        (batch,) = source.batches()
        Y = releases.protect(batch)
        io.write_embeddings(
            self.path,
            Y,
            ids=batch.ids,
            metadata=source.metadata(releases.metadata(batch.X.shape[1])),
            extra=source.table.columns.select(source.keep) if source.keep else None,
            src=source.path,
            commit=releases.commit,
            overwrite=self.overwrite,
        )
        return source.keep, [c for c in source.others if c not in source.keep], "fields"
