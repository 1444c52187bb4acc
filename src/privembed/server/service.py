"""What the server does with texts: identities, one model call per batch, protection, ledger.

Identities, content and keys
----------------------------
A text's *identity* -- its record in the ledger, its per-record budget -- is the HMAC of its
canonical form under the server key ``K``: Unicode NFKC, whitespace runs collapsed and ends
stripped, and case-folded unless ``casefold = false``
(``HMAC-SHA256(K, "privembed/serve/text/v1" || 0x00 || canonical)``, first 128 bits). With a
ledger, texts whose clean embeddings are bit-identical share one identity too: the first
identity seen for a clean vector claims it -- an *alias* keyed by an HMAC of the vector under
the backend's key, never the vector, kept in the ledger (:meth:`privembed.keys.ledger.Ledger.
claim_aliases`: bounded, surviving restarts, shared by every server using the ledger) -- so
variants the canonical form misses (accents, zero-width characters that the model's tokenizer
drops) still land on one record. The ids reveal nothing about the texts to anyone without
``K``. (Without a ledger there is no budget, and an identity only names the keyed noise, which
is bound to the exact text anyway.)

The *content* that keyed noise is bound to is the exact text and the backend's identity
(:func:`privembed.keys.keyed.text_digests`, no canonicalisation): the same text gets the same noise
however it is batched, while any other text -- a variant of the same identity included -- gets
independent noise and is charged as a new release of that identity. So 256 case and whitespace
variants of one note are one identity whose budget admits only as many as it allows.

Each backend gets its own noise key ``K_b = HMAC-SHA256(K, "privembed/serve/backend/v1" ||
0x00 || identity)``, so the same text embedded by two backends gets independent noise.

Subjects
--------
Each request is charged to a *subject*, a name that belongs to the API key that asserts it
(:func:`privembed.server.app.subject_of`): ``key:NAME`` for the key itself, and, only for a key
configured with ``may_assert_subjects = true``, ``key:NAME/SUBJECT`` for the subject it names in
the request's ``user`` field or the ``X-Privembed-Subject`` header. Other keys naming a subject
are refused (403). With a per-subject budget the ledger composes every fresh release of every
text of the subject: this, not the per-text budget, is the limit on averaging paraphrases
(docs/server.md says what it can and cannot stop).

Batches, the ledger lane and queries
------------------------------------
Jobs from concurrent requests meet in one :class:`~.batcher.MicroBatcher` per backend: their
distinct texts are embedded in one model call; then per (model, dimension, subject) group the
release runs once (:class:`privembed.release.Release`). Releases that touch the ledger are
handed to the *ledger lane*: they run in order on the one thread that owns the ledger's SQLite
connection, and the batch worker does not wait for them. A request's whole wait for the ledger
-- its turn in the lane behind other groups, another process's lock, SQLite's busy waits, the
releases of its group -- is bounded by one deadline, ``ledger_timeout_s`` after its group
entered the lane, plus :data:`LANE_MARGIN_S`: a group whose turn comes after its deadline is
refused without trying the lock, the lock is waited for only until the deadline (then one last
attempt, at most 0.2 s), and at the deadline plus the margin the requests are answered
whatever the ledger thread is doing (503 ``ledger_busy`` with Retry-After; work that starts
later is skipped, a commit already under way is recorded and not delivered). The lane admits
texts apart from the model's queue (at most ``max_queue`` texts; beyond that 503 at once,
before the model is called), so documents waiting for the ledger never hold the model's queue or its workers:
everything else (clean and projected queries, servers without a ledger) runs on a separate
thread and never waits for the ledger. If the ledger refuses a group (budget), each request of
the group is retried alone, so only the requests that would pass the budget fail; a refused
request is told what its subject has spent and has left, and the same of those of its texts
that are spent (:class:`BudgetRefused`), nothing about other texts or subjects. A group whose
requests have all been answered already (a client that gave up, a drain that ended) is skipped
if its turn has not come: nothing is charged for it.

With a PostgreSQL ledger (``ledger = "postgresql://..."``) several replicas share one ledger:
its write lock is the database's, so budgets hold across replicas. A replica whose connection
to the ledger breaks, or that cannot reach it, answers ledger-bound requests 503
(``ledger_unavailable``) -- never a release that the ledger did not acknowledge -- while queries
and other work that needs no ledger go on; each later ledger operation connects again.

Rows are recorded for releases that were computed but never delivered: a request that timed
out or was refused at shutdown *after* its release was committed, or a client that hung up.
That is the conservative direction (the ledger may over-count, never under-count).

Draining
--------
:meth:`Service.drain` (SIGTERM): no new work is accepted (503 ``shutting_down``); the work
already admitted may finish for up to ``graceful_shutdown_s``; whatever is still waiting then
is answered 503 ``shutting_down`` (never charged if its release had not started).

Output cache
------------
Keyed releases are cached (LRU, ``cache_size`` vectors, keyed by model, dimension, identity and
content digest -- never by text); cache hits are identical re-releases and are not written to
the ledger again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..keys.keyed import canonical_text, key_id, text_digests, vector_digests
from ..release import Batch, ReleaseRequest, Releases, Rows, Source, publish
from .backends import Backend, BackendError, make_backend
from .batcher import Job, MicroBatcher, QueueFull, ShuttingDown
from .config import ModelConfig, ServeConfig
from .metrics import Metrics
from .refusals import (
    BudgetRefused,
    BudgetState,
    LedgerHealth,
    LedgerUnavailable,
    one_more_exceeds,
    unavailable,
)

__all__ = [
    "LANE_MARGIN_S",
    "BudgetRefused",
    "BudgetState",
    "Embedded",
    "LedgerUnavailable",
    "Service",
    "backend_key",
    "text_record_id",
]

#: seconds a ledger-bound request may wait beyond ``ledger_timeout_s`` before its 503: the
#: last lock attempt (0.2 s) and the commit it may have begun
LANE_MARGIN_S = 0.5

_TEXT_DOMAIN = labels.SERVE_TEXT
_BACKEND_DOMAIN = labels.SERVE_BACKEND
_ALIAS_DOMAIN = labels.SERVE_VECTOR_ALIAS


def text_record_id(key: bytes, text: str, *, casefold: bool = True) -> str:
    """The identity of ``text`` under the server key (32 hex digits; see the module docs).

    Examples
    --------
    >>> a = text_record_id(bytes(32), "the patient has diabetes")
    >>> a == text_record_id(bytes(32), "  The patient  has DIABETES "), len(a)
    (True, 32)
    >>> a == text_record_id(bytes(32), "The patient has diabetes", casefold=False)
    False
    >>> a == text_record_id(bytes(range(32)), "the patient has diabetes")
    False
    """
    canon = canonical_text(text, casefold=casefold)
    return hmac.digest(key, _TEXT_DOMAIN + canon.encode("utf-8"), "sha256").hex()[:32]


def backend_key(key: bytes, identity: str) -> bytes:
    """The noise key of one backend (independent noise across backends)."""
    return hmac.digest(key, _BACKEND_DOMAIN + identity.encode("utf-8"), "sha256")


@dataclass
class Embedded:
    """The result of one request's texts: a vector and a token count per request id."""

    vectors: dict[str, NDArray[np.float32]]
    tokens: dict[str, int]


@dataclass
class _Work:
    model: ModelConfig
    dims: int | None
    ids: list[str]
    texts: list[str]
    subject: str | None = None


class _Response:
    """The HTTP responses of a group of requests as a sink (their source: the group's texts,
    one batch of :class:`~privembed.release.Rows`, ids the texts' identities after the ledger's
    aliases, noise bound to the exact texts, alias claims recorded with the release): handed
    over at once, so the release is committed as published (one write)."""

    destination = "serve"
    per_batch = False

    def __init__(self) -> None:
        self.Y: NDArray[Any] | None = None

    def run(self, source: Source, releases: Releases) -> None:
        (batch,) = source.batches()
        Y = releases.protect(batch)
        releases.commit(published=True)
        self.Y = Y
        releases.published()


def _resolve(fut: asyncio.Future[Any], value: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():  # cancelled by a client timeout
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class Service:
    """The running state of a server: backends, batchers, the ledger thread, cache, metrics."""

    def __init__(self, config: ServeConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        s = config.server
        self.keyed = s.noise == "keyed"
        self.backends: dict[str, Backend] = {
            name: make_backend(b) for name, b in config.backends.items()
        }
        # per-backend noise keys follow what computes the vectors: set once each backend has
        # started (a local model is identified by a digest of itself, known once loaded)
        self._bkeys: dict[str, bytes] = {}
        self._bkey_ids: dict[str, str] = {}
        self._identity: dict[str, str] = {}
        self.batchers: dict[str, MicroBatcher] = {}
        # one thread owns the ledger's SQLite connection; another runs releases without it,
        # so requests that never touch the ledger never wait for it
        self._ledger_thread = ThreadPoolExecutor(1, thread_name_prefix="privembed-ledger")
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="privembed-protect")
        self._ledger: Any = None
        self._ledger_stack = contextlib.ExitStack()
        self.ledger_health = LedgerHealth(state="none" if s.ledger is None else "ok")
        self._cache: OrderedDict[tuple[Any, ...], tuple[NDArray[np.float32], int]]
        self._cache = OrderedDict()
        self.cache_size = s.cache_size if self.keyed else 0
        #: texts admitted to the ledger lane and not yet answered (bounded by max_queue)
        self.lane_texts = 0
        self.lane_capacity = s.max_queue
        self._lane_tasks: set[asyncio.Task[None]] = set()
        #: result futures of requests in progress (answered 503 if a drain runs out of time)
        self._waiting: set[asyncio.Future[Any]] = set()
        self.ready = False
        self.draining = False

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.config.server
        loop = asyncio.get_running_loop()
        if s.ledger is not None:
            self._ledger = await loop.run_in_executor(self._ledger_thread, self._open_ledger)
        for name, backend in self.backends.items():
            await backend.start()
            self._identity[name] = backend.identity
            self._bkeys[name] = backend_key(self.config.key, backend.identity)
            self._bkey_ids[name] = key_id(self._bkeys[name])
            b = MicroBatcher(
                self._process,
                max_batch=s.max_batch,
                max_wait=s.max_wait_ms / 1000.0,
                max_queue=s.max_queue,
                workers=backend.max_concurrency,
                on_batch=self.metrics.observe_batch,
            )
            b.start()
            self.batchers[name] = b
        await loop.run_in_executor(self._compute, self._warm_up)
        self.ready = True

    def _open_ledger(self) -> Any:
        """Open the ledger; the configured budgets may set a first budget or confirm/lower one
        (never raise it: that is ``privembed ledger budget --raise``)."""
        s = self.config.server
        assert s.ledger is not None
        # the release path's one way to open a ledger, held for every release the server
        # makes; a failure here leaves no empty ledger
        request = ReleaseRequest(
            ledger=s.ledger,
            budget_epsilon=s.budget_epsilon,
            budget_delta=s.budget_delta,
            subject_budget=(s.subject_budget_epsilon, s.subject_budget_delta),
            ledger_timeout=s.ledger_timeout_s,
        )
        with contextlib.ExitStack() as stack:
            led = stack.enter_context(request.opened())
            assert led is not None
            legacy = [x for x in led.subjects() if not x.startswith(("key:", "unauthenticated"))]
            self._ledger_stack = stack.pop_all()
        if legacy:  # a count only: subject names can be user names
            from .logs import logger

            logger.warning(
                "ledger_legacy_subjects",
                extra={
                    "fields": {
                        "subjects": len(legacy),
                        "note": "subjects written before subjects were namespaced by API key "
                        "(key:NAME/...) are kept as they are and not counted against the "
                        "namespaced ones (docs/server.md)",
                    }
                },
            )
        return led

    def _warm_up(self) -> None:
        """Check dimensions and build projections, sigmas and angle tables before serving.

        Only for backends whose dimension is known at start (local models).
        """
        from .errors import ConfigError

        for m in self.config.models.values():
            d = self.backends[m.backend].dim
            if d is None:
                continue
            for mech in m.mechanisms.values():
                try:
                    mech.check_dim(d)
                except ValueError as exc:
                    raise ConfigError(
                        f"{self.config.source}: [models.{m.name}] backend {m.backend!r} gives "
                        f"{d}-dimensional vectors: {exc}"
                    ) from None
                mech.expected_cosine(d)  # builds angle tables and the like once

    async def drain(self, limit_s: float) -> int:
        """Accept no new work; let admitted work finish for up to ``limit_s`` seconds; then
        answer whatever is still waiting with :class:`ShuttingDown` (503). Returns how many
        requests were answered so. Work already running goes on in the background (its result
        is dropped); ledger work whose turn has not come is skipped (never charged)."""
        self.draining = True
        self.ready = False
        for b in self.batchers.values():
            b.close()
        pending = {f for f in self._waiting if not f.done()}
        if pending:
            await asyncio.wait(pending, timeout=limit_s)
        refused = 0
        for f in list(self._waiting):
            if not f.done():
                f.set_exception(ShuttingDown())
                refused += 1
        return refused

    async def stop(self) -> None:
        """Finish queued work, then close backends and the ledger."""
        self.ready = False
        await asyncio.gather(*(b.stop() for b in self.batchers.values()))
        if self._lane_tasks:
            await asyncio.gather(*list(self._lane_tasks), return_exceptions=True)
        for backend in self.backends.values():
            await backend.close()
        loop = asyncio.get_running_loop()
        if self._ledger is not None:
            await loop.run_in_executor(self._ledger_thread, self._ledger_stack.close)
        self._ledger_thread.shutdown(wait=True)
        self._compute.shutdown(wait=True)

    @property
    def queue_depth(self) -> int:
        return sum(b.pending for b in self.batchers.values())

    def needs_ledger(self, model: ModelConfig) -> bool:
        """Whether releases of ``model`` are recorded in the ledger (they take the lane)."""
        return self._ledger is not None and model.treatment == "protect"

    def retry_after(self, model: ModelConfig) -> int:
        """Seconds a client refused for a full queue (or lane) should wait."""
        wait = self.batchers[model.backend].retry_after()
        if self.needs_ledger(model):
            lane = max(1, min(30, int(self.config.server.ledger_timeout_s + 0.999)))
            wait = max(wait, lane)
        return wait

    # ---- the request path --------------------------------------------------------------------
    def record_ids(self, texts: list[str]) -> list[str]:
        """Identities of ``texts`` (canonical form; see the module docstring)."""
        cf = self.config.server.casefold
        return [text_record_id(self.config.key, t, casefold=cf) for t in texts]

    def _cache_key(self, model: ModelConfig, dims: int | None, rid: str, text: str) -> Any:
        return (model.name, dims, rid, text)

    def cached(
        self, model: ModelConfig, dims: int | None, rid: str, text: str = ""
    ) -> tuple[Any, int] | None:
        if not self.cache_size:
            return None
        k = self._cache_key(model, dims, rid, text)
        hit = self._cache.get(k)
        if hit is not None:
            self._cache.move_to_end(k)
        return hit

    def _store(
        self,
        model: ModelConfig,
        dims: int | None,
        vecs: dict[str, Any],
        toks: dict[str, int],
        texts: dict[str, str],
    ) -> None:
        if not self.cache_size:
            return
        for rid, v in vecs.items():
            self._cache[self._cache_key(model, dims, rid, texts[rid])] = (v, toks[rid])
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def embed(
        self,
        model: ModelConfig,
        dims: int | None,
        ids: list[str],
        texts: list[str],
        *,
        subject: str | None = None,
    ) -> Embedded:
        """Vectors for distinct request ``ids`` (with their ``texts``) under ``model`` at ``dims``.

        Raises
        ------
        QueueFull, ShuttingDown
            From the batcher (503).
        BackendError
            The backend failed (502/503/504).
        BudgetRefused
            The ledger refused the release (403).
        LedgerUnavailable
            The ledger stayed locked by another process (503).
        """
        vecs: dict[str, NDArray[np.float32]] = {}
        toks: dict[str, int] = {}
        todo_ids, todo_texts = [], []
        for rid, text in zip(ids, texts, strict=True):
            hit = self.cached(model, dims, rid, text)
            if hit is not None:
                vecs[rid], toks[rid] = hit
            else:
                todo_ids.append(rid)
                todo_texts.append(text)
        self.metrics.cache_hits += len(ids) - len(todo_ids)
        if not todo_ids:
            return Embedded(vecs, toks)
        if self.draining:
            raise ShuttingDown()
        n = len(todo_ids)
        lane = self.needs_ledger(model)
        if lane:  # admitted apart: documents waiting for the ledger never fill the model's queue
            busy = len(self._lane_tasks)  # groups not finished, answered or not
            if self.lane_texts + n > self.lane_capacity or busy >= self.lane_capacity:
                raise QueueFull()
            self.lane_texts += n
        try:
            work = _Work(model, dims, todo_ids, todo_texts, subject)
            fut = self.batchers[model.backend].enqueue(work, n)
            self._waiting.add(fut)
            try:
                got: Embedded = await fut
            finally:
                self._waiting.discard(fut)
        finally:
            if lane:
                self.lane_texts -= n
        vecs.update(got.vectors)
        toks.update(got.tokens)
        return Embedded(vecs, toks)

    # ---- one batch ---------------------------------------------------------------------------
    async def _process(self, jobs: list[Job]) -> None:
        works: list[_Work] = [j.payload for j in jobs]
        backend = self.backends[works[0].model.backend]
        texts: dict[str, str] = {}  # exact text -> itself; one model call per distinct text
        for w in works:
            texts.update((t, t) for t in w.texts)
        order = list(texts)
        try:
            X, counts = await backend.embed(order)
        except BackendError as exc:
            for j in jobs:
                _resolve(j.future, exc=exc)
            return
        row = {t: i for i, t in enumerate(order)}
        tokens = dict(zip(order, counts, strict=True))
        groups: dict[tuple[str, int | None, str | None], list[Job]] = {}
        for j in jobs:
            w = j.payload
            groups.setdefault((w.model.name, w.dims, w.subject), []).append(j)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.config.server.ledger_timeout_s  # for the lane
        for group in groups.values():
            lane = self.needs_ledger(group[0].payload.model)
            coro = self._protect_group(
                loop, backend, group, X, row, tokens, deadline if lane else None
            )
            if lane:
                self._to_lane(coro)  # the batch worker does not wait for the ledger
            else:
                await coro

    def _to_lane(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a ledger-bound group as its own task (in order: the ledger thread is FIFO)."""
        task = asyncio.create_task(coro)
        self._lane_tasks.add(task)
        task.add_done_callback(self._lane_tasks.discard)

    def alias_tags(self, backend: str, X: NDArray[np.float32]) -> list[str]:
        """The alias tag of each clean vector: HMAC under the backend's key of its digest."""
        key = self._bkeys[backend]
        return [
            hmac.digest(key, _ALIAS_DOMAIN + dg, "sha256")[:16].hex() for dg in vector_digests(X)
        ]

    async def _protect_group(
        self,
        loop: asyncio.AbstractEventLoop,
        backend: Backend,
        jobs: list[Job],
        X: NDArray[np.float32],
        row: dict[str, int],
        tokens: dict[str, int],
        deadline: float | None = None,
    ) -> None:
        """Release one group and answer its requests; ``deadline`` (ledger-bound groups, by
        :func:`time.monotonic`): when their wait for the ledger ends (the module docs)."""
        w0: _Work = jobs[0].payload
        model, dims, subject = w0.model, w0.dims, w0.subject
        items: dict[str, str] = {}  # request id -> exact text
        for j in jobs:
            items.update(zip(j.payload.ids, j.payload.texts, strict=True))
        rids = list(items)
        Xg = X[[row[items[r]] for r in rids]]
        needs_ledger = self.needs_ledger(model)
        pool = self._ledger_thread if needs_ledger else self._compute
        futures = [j.future for j in jobs]
        try:
            run = loop.run_in_executor(
                pool,
                self._release,
                model,
                dims,
                backend.name,
                rids,
                [items[r] for r in rids],
                Xg,
                subject,
                futures if needs_ledger else None,
                deadline,
            )
            if deadline is not None:
                self._answer_at(loop, deadline + LANE_MARGIN_S, futures, run)
            Y = await run
        except BudgetRefused as exc:
            if len(jobs) > 1:  # find the requests that pass on their own
                for j in jobs:
                    await self._protect_group(loop, backend, [j], X, row, tokens, deadline)
                return
            _resolve(jobs[0].future, exc=exc)
            return
        except Exception as exc:
            for j in jobs:
                _resolve(j.future, exc=exc)
            return
        if Y is None:  # every request of the group was answered before its turn: skipped
            return
        vecs = dict(zip(rids, Y, strict=True))
        toks = {r: tokens[items[r]] for r in rids}
        if self.keyed:
            self._store(model, dims, vecs, toks, items)
        for j in jobs:
            r_ids = j.payload.ids
            _resolve(j.future, Embedded({r: vecs[r] for r in r_ids}, {r: toks[r] for r in r_ids}))

    @staticmethod
    def _answer_at(
        loop: asyncio.AbstractEventLoop,
        when: float,
        futures: list[asyncio.Future[Any]],
        run: asyncio.Future[Any],
    ) -> None:
        """At ``when`` (:func:`time.monotonic`), answer the group's requests that are still
        waiting 503 ``ledger_busy``, whatever the ledger thread is doing (unless it is done)."""

        def answer() -> None:
            if not run.done():
                for f in futures:
                    _resolve(f, exc=LedgerUnavailable("the request's wait for the ledger ran out."))

        handle = loop.call_later(max(0.0, when - time.monotonic()), answer)
        run.add_done_callback(lambda _: handle.cancel())

    def _release(
        self,
        model: ModelConfig,
        dims: int | None,
        backend: str,
        ids: list[str],
        texts: list[str],
        X: NDArray[np.float32],
        subject: str | None,
        futures: list[asyncio.Future[Any]] | None = None,
        deadline: float | None = None,
    ) -> NDArray[np.float32] | None:
        """Protect (or project) one group; on the ledger thread when the ledger records it.

        ``futures`` (ledger work): the group's result futures; if every one is already done
        when the group's turn comes, nothing is released or charged (``None``). ``deadline``
        (:func:`time.monotonic`): the ledger is waited for until then, and a group whose turn
        comes later is refused without trying it (:class:`LedgerUnavailable`). With a ledger
        the texts' identities first go through the ledger's clean-vector aliases.
        """
        mech = model.mechanism(dims)
        if model.treatment == "none" or mech is None:
            return np.ascontiguousarray(X, dtype=np.float32)
        if model.treatment == "project":
            return np.asarray(mech.public_transform(X), dtype=np.float32)
        if futures is not None and all(f.done() for f in futures):
            return None
        ledger = self._ledger
        if ledger is None:
            return self._rounds(mech, backend, ids, texts, X, subject, None, None)
        if deadline is not None and time.monotonic() >= deadline:
            raise LedgerUnavailable("the request's wait for its turn in the ledger lane ran out.")
        from ..keys.ledger import AliasConflict, LedgerBusy

        for _ in range(3):  # another process may claim a looked-up alias meanwhile: look again
            try:
                tags = self.alias_tags(backend, X)
                known = ledger.lookup_aliases(tags)
                owners = [known.setdefault(t, rid) for t, rid in zip(tags, ids, strict=True)]
                return self._rounds(mech, backend, owners, texts, X, subject, ledger,
                                    (tags, owners), deadline)  # fmt: skip
            except AliasConflict:
                continue
            except LedgerBusy as exc:  # locked, or (LedgerUnreachable) lost
                raise unavailable(self.ledger_health, exc) from None
            except BudgetRefused as exc:
                if futures is None or len(futures) != 1:
                    raise  # (a group is retried request by request: the last one tells)
                owned = dict(zip(ids, owners, strict=True))
                raise self._refusal(exc, mech, ledger, subject, owned) from None
        raise LedgerUnavailable("the ledger's aliases kept changing under concurrent writers.")

    def _refusal(
        self,
        exc: BudgetRefused,
        mech: Any,
        ledger: Any,
        subject: str | None,
        owners: dict[str, str],
    ) -> BudgetRefused:
        """``exc`` with what one request may see (on the ledger thread, after the refusal):
        its subject's budget, spend and what is left, and its texts that are spent
        (:class:`BudgetRefused`); only ``exc`` if the ledger cannot be read now."""
        import sqlite3

        from ..core.accounting import Composition, cost_of
        from ..keys.ledger import LedgerBusy, record_key

        cost = cost_of(mech.guarantee)
        try:  # the budgets are read from the ledger too: a lost connection is no 500
            per_text, per_subject = ledger.budget, ledger.subject_budget
            at = per_text or per_subject
            texts: dict[str, BudgetState] = {}
            if per_text is not None:
                spent = {x.record_id: x for x in ledger.spent(list(set(owners.values())))}
                for rid, owner in owners.items():
                    sp = spent.get(record_key(owner))
                    if sp is not None and one_more_exceeds(sp, cost, per_text):
                        texts[rid] = BudgetState(
                            per_text.epsilon, per_text.delta, sp.epsilon, sp.delta
                        )
            state = None
            if per_subject is not None and subject is not None:
                sp = ledger.spent_subject(subject)
                state = BudgetState(per_subject.epsilon, per_subject.delta, sp.epsilon, sp.delta)
        except (LedgerBusy, sqlite3.Error):
            return exc
        one = Composition().add(cost).at(at.delta) if at is not None else None
        return BudgetRefused(exc.scope, cost=one, subject=state, texts=texts)

    def _rounds(
        self,
        mech: Any,
        backend: str,
        ids: list[str],
        texts: list[str],
        X: NDArray[np.float32],
        subject: str | None,
        ledger: Any,
        claims: tuple[list[str], list[str]] | None,
        deadline: float | None = None,
    ) -> NDArray[np.float32]:
        """One release per round of distinct ids (ids may repeat after aliasing: two texts
        with one clean vector); the first round also records the alias claims. With a ledger
        each is committed -- with its alias claims and marked published -- in one transaction
        (the response follows at once), waiting for another process's lock until ``deadline``
        at most."""
        from ..keys.ledger import BudgetExceeded, LedgerBusy

        rounds: list[list[int]] = []
        for i, rid in enumerate(ids):
            for r in rounds:
                if all(ids[k] != rid for k in r):
                    r.append(i)
                    break
            else:
                rounds.append([i])
        s = self.config.server
        ident = self._identity[backend]
        request = ReleaseRequest(
            key=self._bkeys[backend] if self.keyed else None,
            generator=s.generator,
            ledger=ledger,
            subject=subject,
        )
        out = np.empty((len(ids), mech.output_dim(X.shape[1])), dtype=np.float32)
        for n, r in enumerate(rounds):
            if ledger is not None:  # (the ledger thread owns it: its wait is this request's)
                left = s.ledger_timeout_s if deadline is None else deadline - time.monotonic()
                ledger.timeout = max(0.0, left)
            digests = text_digests([texts[i] for i in r], ident) if self.keyed else None
            batch = Batch(X[r], [ids[i] for i in r], digests=digests,
                          aliases=claims if n == 0 else None)  # fmt: skip
            sink = _Response()
            try:
                publish(Rows(batch, "request", ident), sink, mech, request)
            except BudgetExceeded as exc:  # (the commit recorded the alias claims all the same)
                if ledger is not None:
                    self.ledger_health.set("ok")
                raise BudgetRefused("subject" if "subject" in str(exc) else "record") from None
            except LedgerBusy as exc:  # locked, or (LedgerUnreachable) lost: nothing released
                raise unavailable(self.ledger_health, exc) from None
            if ledger is not None:
                self.ledger_health.set("ok")
            out[r] = sink.Y
        return out

    # ---- introspection -------------------------------------------------------------------------
    def describe_models(self) -> list[dict[str, Any]]:
        """Public description of every model (mechanism, guarantee, dimensions)."""
        out = []
        for m in self.config.models.values():
            mech = m.mechanism(None)
            out.append(
                {
                    "id": m.name,
                    "role": m.role,
                    "treatment": m.treatment,
                    "mechanism": mech.config if mech is not None else None,
                    "guarantee": m.describe(),
                    "dimensions": list(m.allowed_dims) or None,
                    "noise": ("keyed" if self.keyed else "fresh")
                    if m.treatment == "protect"
                    else None,
                }
            )
        return out
