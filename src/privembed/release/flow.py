"""Sources and sinks: every front end is a *source*, the :class:`~privembed.release.core.Release`
and a *sink*, composed by :func:`publish`.

A **source** (:class:`Source`) gives the release its clean vectors, batch by batch
(:class:`Batch`: the rows, their record ids, and what the release binds or charges them to); a
**sink** (:class:`Sink`) writes the protected rows where they go and makes them visible only
after the release that covers them is committed in the ledger. The front end names the two and
the randomness and ledger it asked for (:class:`ReleaseRequest`); :func:`publish` opens the
ledger (:func:`~privembed.release.policy.open_ledger`), and the :class:`Releases` it hands the
sink stage, commit and publish the releases -- no front end opens a ledger or stages a release
itself.

A sink decides how much one release covers by when it commits: all it writes (a file renamed
into place, a folder of shards) or each batch as it is written (a stream's lines, a store's
upserts, an HTTP response). It is handed no more than the release's callbacks
(:meth:`Releases.protect`, :meth:`Releases.commit`, :meth:`Releases.published`), so control
never climbs back above the release.

=====================  ================================  =================================
front end              source                            sink
=====================  ================================  =================================
``protect_file``       a vectors or texts file           a file, written atomically
                       (:mod:`~privembed.release.files`)  (:mod:`~privembed.release.files`)
``protect_stream``     stdin's JSONL lines or NPY rows    stdout (lines or NPY), a release
                       (``integrations.stream``)          per batch
``protect_shards``     Parquet shards                    a staging folder renamed into place
                       (``integrations.shards``)          (local or Ray engine)
``index_file``         a vectors or texts file           a vector store, a release per batch
                       (``integrations.collection``)      (``ProtectedCollection``)
the server             a group of requests' texts         their HTTP responses, committed as
                       (``server.service``)               published
=====================  ================================  =================================
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from numpy.typing import NDArray

from ..keys.ledger import Ledger
from ..mechanisms.base import Mechanism
from .core import Release, ReleaseSummary
from .ids import ReleasedIds
from .policy import check_randomness, open_ledger
from .setting import setting_note

__all__ = ["Batch", "ReleaseRequest", "Releases", "Rows", "Sink", "Source", "publish"]


@dataclass
class Batch:
    """One batch of a source: clean rows and what the release needs to know of them.

    Attributes
    ----------
    X : array_like, shape (n, d)
        The clean vectors (after any pre-noise step).
    ids : list, optional
        Record ids (required with a key or a ledger). :meth:`Releases.protect` replaces them by
        the ids the rows are released under (content ids folded, ``fold``).
    start : int
        Absolute number of the batch's first row (seeded noise, messages).
    digests, subjects
        Content digests the keyed noise is bound to, and the subject of each record
        (:meth:`Release.protect <privembed.release.core.Release.protect>`).
    fold : bool
        The ids were derived from the content: fold them over the ledger's clean-vector
        aliases (:meth:`Release.fold <privembed.release.core.Release.fold>`) first.
    aliases : (tags, owners), optional
        Alias claims recorded in the release's transaction, kept on a refusal (the server's).
    name : str, optional
        The release's name in messages (default: the source's).
    ids_at : str, optional
        Where an id repeated across the releases of a run is reported (default: ``name``).
    carry : object
        What the sink writes beside the vectors (fields, metadata, texts), untouched.
    """

    X: Any
    ids: list[Any] | None = None
    start: int = 0
    digests: Sequence[bytes] | None = None
    subjects: Sequence[Any] | None = None
    fold: bool = False
    aliases: tuple[list[str], list[str]] | None = None
    name: str | None = None
    ids_at: str | None = None
    carry: Any = None


class Source(Protocol):
    """Where a release's clean vectors come from (a file, a stream, shards, a server request)."""

    @property
    def name(self) -> str:
        """The input's name in messages."""
        ...

    @property
    def model(self) -> str | None:
        """The identity of the embedding model that made the vectors (keyed context)."""
        ...

    def batches(self) -> Iterable[Batch]:
        """The batches, in order (read lazily: inside the ledger's budget check)."""
        ...


class Sink(Protocol):
    """Where a release's protected vectors go (a file, a store, a stream, an HTTP response).

    :meth:`run` writes every batch of the source, protected by ``releases.protect``, and
    calls ``releases.commit()`` before any row it covers becomes visible, then
    ``releases.published()`` once it is.
    """

    @property
    def destination(self) -> str:
        """Where the output goes (recorded in the ledger)."""
        ...

    @property
    def per_batch(self) -> bool:
        """Each batch is its own release, published as it is written: ids must then be
        unique across the releases of the run (:class:`Releases` checks them)."""
        ...

    def run(self, source: Source, releases: Releases) -> None: ...


@dataclass(frozen=True)
class Rows:
    """Rows in memory as a source: one batch (a server request's texts, a store's upsert)."""

    batch: Batch
    name: str = "X"
    model: str | None = None

    def batches(self) -> list[Batch]:
        return [self.batch]


@dataclass(frozen=True)
class ReleaseRequest:
    """The randomness and ledger a front end asked for: a key or a seed (never both, never a
    seed with a ledger), the ledger (a path, a ``postgresql://`` URL or an open
    :class:`~privembed.keys.ledger.Ledger`), its budget flags, the subject charged and how long
    to wait for another process's lock."""

    key: Any = None
    rng: Any = None
    generator: str | None = None
    ledger: str | Path | Ledger | None = None
    budget_epsilon: float | None = None
    budget_delta: float | None = None
    subject: str | None = None
    subject_budget: tuple[float | None, float | None] = (None, None)
    ledger_timeout: float = 60.0
    on_wait: Callable[[Path], None] | None = None

    @property
    def needs_ids(self) -> bool:
        """Keyed noise and the ledger need record ids."""
        return self.key is not None or self.ledger is not None

    def check(self, *, key_name: str = "a key", rng_name: str = "a seed") -> None:
        """Refuse the randomness before anything is read or written
        (:func:`~privembed.release.policy.check_randomness`)."""
        check_randomness(self.key, self.rng, ledger=self.ledger, key_name=key_name,
                         rng_name=rng_name)  # fmt: skip

    @contextlib.contextmanager
    def opened(self) -> Iterator[Ledger | None]:
        """The ledger, opened the one way (:func:`~privembed.release.policy.open_ledger`)."""
        with open_ledger(
            self.ledger,
            budget_epsilon=self.budget_epsilon,
            budget_delta=self.budget_delta,
            subject_budget=self.subject_budget,
            on_wait=self.on_wait,
            timeout=self.ledger_timeout,
        ) as led:
            yield led


class Releases:
    """The releases of one run of a source into a sink: a :class:`Release` is begun by the first
    batch after each commit, so a sink that commits once publishes one release and one that
    commits per batch publishes one per batch. :attr:`summary` adds them up."""

    def __init__(
        self,
        mechanism: Mechanism,
        request: ReleaseRequest,
        ledger: Ledger | None,
        *,
        destination: str,
        name: str,
        model: str | None,
        per_batch: bool = False,
    ) -> None:
        self.mechanism, self.request, self.ledger = mechanism, request, ledger
        self.destination, self.name, self.model = destination, name, model
        self.current: Release | None = None
        #: what the run's releases did, added up (the first release's own summary)
        self.summary: ReleaseSummary | None = None
        #: how many releases were published
        self.count = 0
        self._seen = ReleasedIds() if per_batch and request.needs_ids else None
        self.release()  # an unaccountable guarantee is refused before any work

    def release(self, name: str | None = None) -> Release:
        """The release being filled (begun now if there is none); ``name``: its name in
        messages from now on."""
        if self.current is None:
            r = self.request
            self.current = Release(
                self.mechanism, key=r.key, rng=r.rng, generator=r.generator, ledger=self.ledger,
                subject=r.subject, model=self.model, destination=self.destination,
                name=name or self.name,
            )  # fmt: skip
        if name is not None:
            self.current.name = name
        return self.current

    def protect(self, batch: Batch) -> NDArray[Any]:
        """The protected rows of ``batch`` (staged in the current release); ``batch.ids``
        become the ids they are released under."""
        if self._seen is not None and batch.ids is not None:
            self._seen.add_ids(batch.ids, where=batch.ids_at or batch.name or self.name)
        rel = self.release(batch.name)
        if batch.fold and batch.ids is not None:
            batch.ids = rel.fold(batch.X, batch.ids)
        Y = rel.protect(
            batch.X, batch.ids, digests=batch.digests, row_offset=batch.start,
            subjects=batch.subjects,
        )  # fmt: skip
        if batch.aliases is not None and rel.staged is not None:
            rel.staged.claim_aliases(*batch.aliases)
        return Y

    def account(self, batch: Batch) -> None:
        """Stage rows whose noise workers draw (:meth:`Release.account`)."""
        assert batch.ids is not None
        self.release().account(batch.X, batch.ids, digests=batch.digests)

    def metadata(self, dim: int | None = None) -> dict[str, Any]:
        """The protection metadata written next to the output."""
        return self.release().metadata(dim)

    def worker_copy(self) -> Release:
        """A copy of the current release without the ledger, for workers."""
        return self.release().worker_copy()

    def commit(self, *, published: bool = False) -> ReleaseSummary:
        """Record the current release in the ledger (budgets checked) before its rows become
        visible; ``published``: the sink hands them over at once (one write)."""
        return self.release().commit(published=published)

    def published(self) -> None:
        """The committed rows are visible: note it in the ledger and close the release."""
        rel = self.current
        if rel is None:
            return
        rel.mark_published()
        rel.close()
        self.current = None
        self.count += 1
        if self.summary is None:
            self.summary = rel.summary
            return
        total, s = self.summary, rel.summary
        total.rows += s.rows
        total.dim_out = s.dim_out
        total.ledger_batch = s.ledger_batch or total.ledger_batch
        if s.fresh is not None:
            total.fresh = (total.fresh or 0) + s.fresh
            total.free = (total.free or 0) + (s.free or 0)

    def note_setting(self) -> None:
        """Put the setting's note for the input dimension in :attr:`summary`
        (:func:`~privembed.release.setting.setting_note`; none below dimension 2)."""
        s = self.summary
        if s is not None and s.dim_in is not None and s.dim_in >= 2:
            s.setting = setting_note(self.mechanism, s.dim_in)

    def close(self) -> None:
        """Forget a release that was not committed (a failure); release resources."""
        try:
            if self.current is not None:
                self.current.close()
                self.current = None
        finally:
            if self._seen is not None:
                self._seen.close()
                self._seen = None


def publish(source: Source, sink: Sink, mechanism: Mechanism, request: ReleaseRequest) -> Releases:
    """Run ``source`` through the release into ``sink``: the ledger opened the one way, the
    releases the sink commits, nothing left staged on a failure. Returns the run's
    :class:`Releases` (its ``summary`` and ``count``)."""
    request.check()  # before the ledger is opened or the source read
    with request.opened() as led:
        releases = Releases(
            mechanism, request, led, destination=sink.destination, name=source.name,
            model=source.model, per_batch=sink.per_batch,
        )  # fmt: skip
        try:
            sink.run(source, releases)
        finally:
            releases.close()
    return releases
