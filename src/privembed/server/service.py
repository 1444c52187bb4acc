"""What the server does with texts: record ids, one model call per batch, protection, ledger.

Record ids and keys
-------------------
The record id of a text is ``HMAC-SHA256(K, "privembed/serve/text/v1" || 0x00 || utf8(text))``
(first 128 bits, hex), with ``K`` the server key: identical texts have identical ids, and the
ids (which the ledger stores) reveal nothing about the texts to anyone without ``K``.

Each backend gets its own noise key ``K_b = HMAC-SHA256(K, "privembed/serve/backend/v1" || 0x00
|| identity)``, with the backend's identity (type, model, upstream URL). Without it, the same
text embedded by two backends under the same mechanism would get the *same* noise, and the
difference of the two releases would be noise-free. With it, re-releasing a text through the
same backend, mechanism and dimension returns the identical vector (:mod:`privembed.keyed`),
while any other combination gets independent noise -- and is a fresh release in the ledger,
which composes per record id (that is, per text).

Batches
-------
Jobs from concurrent requests meet in one :class:`~.batcher.MicroBatcher` per backend: their
distinct texts are embedded in one model call; then per (model, dimension) group the
mechanism runs once over the group's distinct texts, inside one ledger transaction. If the
ledger refuses a group (budget), each request of the group is retried alone, so only the
requests that would pass the budget fail.

Output cache
------------
Keyed releases are cached (LRU, ``cache_size`` vectors, keyed by model, dimension and record
id -- never by text). A model's clean vector can differ in the last float32 bit depending on
which other texts share its batch (padding changes the kernels' summation order); the cache
makes repeats within a process bit-identical regardless, and skips the model call. Cache hits
are not written to the ledger: they are re-releases of a vector it already recorded.
"""

from __future__ import annotations

import asyncio
import hmac
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..keyed import key_id
from ..mechanisms.projection import PrivateProjection
from .backends import Backend, BackendError, make_backend
from .batcher import Job, MicroBatcher
from .config import ModelConfig, ServeConfig
from .metrics import Metrics

__all__ = ["BudgetRefused", "Embedded", "Service", "backend_key", "text_record_id"]

_TEXT_DOMAIN = b"privembed/serve/text/v1\x00"
_BACKEND_DOMAIN = b"privembed/serve/backend/v1\x00"


def text_record_id(key: bytes, text: str) -> str:
    """The record id of ``text`` under the server key (32 hex digits; see the module docs).

    Examples
    --------
    >>> a = text_record_id(bytes(32), "the patient has diabetes")
    >>> a == text_record_id(bytes(32), "the patient has diabetes"), len(a)
    (True, 32)
    >>> a == text_record_id(bytes(range(32)), "the patient has diabetes")
    False
    """
    return hmac.digest(key, _TEXT_DOMAIN + text.encode("utf-8"), "sha256").hex()[:32]


def backend_key(key: bytes, identity: str) -> bytes:
    """The noise key of one backend (independent noise across backends)."""
    return hmac.digest(key, _BACKEND_DOMAIN + identity.encode("utf-8"), "sha256")


class BudgetRefused(Exception):
    """The ledger refused a release: some input would pass the per-record budget."""


@dataclass
class Embedded:
    """The result of one request's texts: a vector and a token count per record id."""

    vectors: dict[str, NDArray[np.float32]]
    tokens: dict[str, int]


@dataclass
class _Work:
    model: ModelConfig
    dims: int | None
    ids: list[str]
    texts: list[str]


def _resolve(fut: asyncio.Future[Any], value: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():  # cancelled by a client timeout
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class _LedgerView:
    """What the ledger reads of a mechanism, with d-dependent values fixed for one dimension.

    :class:`PrivateProjection` calibrates sigma per input dimension and exposes
    ``sensitivity(d)`` as a method, while the ledger expects numbers; the ratio sigma /
    sensitivity that it composes is the same for every ``d``.
    """

    def __init__(self, mech: Any, sigma: float, sensitivity: float) -> None:
        self.guarantee = mech.guarantee
        self.fingerprint = mech.fingerprint
        self.sigma = sigma
        self.sensitivity = sensitivity

    @staticmethod
    def of(mech: Any, d: int) -> Any:
        if isinstance(mech, PrivateProjection):
            return _LedgerView(mech, mech.sigma_for(d), mech.sensitivity(d))
        return mech


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
        self._bkeys = {
            name: backend_key(config.key, b.identity) for name, b in config.backends.items()
        }
        self._bkey_ids = {name: key_id(k) for name, k in self._bkeys.items()}
        self.batchers: dict[str, MicroBatcher] = {}
        # one thread runs every mechanism and owns the ledger's SQLite connection
        self._protect = ThreadPoolExecutor(1, thread_name_prefix="privembed-protect")
        self._ledger: Any = None
        self._cache: OrderedDict[tuple[str, int | None, str], tuple[NDArray[np.float32], int]]
        self._cache = OrderedDict()
        self.cache_size = s.cache_size if self.keyed else 0
        self.ready = False

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.config.server
        loop = asyncio.get_running_loop()
        if s.ledger is not None:
            from ..ledger import Ledger

            path, be, bd = s.ledger, s.budget_epsilon, s.budget_delta
            self._ledger = await loop.run_in_executor(
                self._protect, lambda: Ledger(path, budget_epsilon=be, budget_delta=bd)
            )
        for name, backend in self.backends.items():
            await backend.start()
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
        await loop.run_in_executor(self._protect, self._warm_up)
        self.ready = True

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
                    mech._check_dim(d)
                except ValueError as exc:
                    raise ConfigError(
                        f"{self.config.source}: [models.{m.name}] backend {m.backend!r} gives "
                        f"{d}-dimensional vectors: {exc}"
                    ) from None
                table = getattr(mech, "angle_table", None)
                if callable(table):
                    table(d)

    async def stop(self) -> None:
        """Finish queued work, then close backends and the ledger."""
        self.ready = False
        await asyncio.gather(*(b.stop() for b in self.batchers.values()))
        for backend in self.backends.values():
            await backend.close()
        loop = asyncio.get_running_loop()
        if self._ledger is not None:
            await loop.run_in_executor(self._protect, self._ledger.close)
        self._protect.shutdown(wait=True)

    @property
    def queue_depth(self) -> int:
        return sum(b.pending for b in self.batchers.values())

    # ---- the request path --------------------------------------------------------------------
    def record_ids(self, texts: list[str]) -> list[str]:
        return [text_record_id(self.config.key, t) for t in texts]

    def cached(self, model: ModelConfig, dims: int | None, rid: str) -> tuple[Any, int] | None:
        if not self.cache_size:
            return None
        k = (model.name, dims, rid)
        hit = self._cache.get(k)
        if hit is not None:
            self._cache.move_to_end(k)
        return hit

    def _store(
        self, model: ModelConfig, dims: int | None, vecs: dict[str, Any], toks: dict[str, int]
    ) -> None:
        if not self.cache_size:
            return
        for rid, v in vecs.items():
            self._cache[(model.name, dims, rid)] = (v, toks[rid])
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def embed(
        self, model: ModelConfig, dims: int | None, ids: list[str], texts: list[str]
    ) -> Embedded:
        """Vectors for distinct ``ids`` (with their ``texts``) under ``model`` at ``dims``.

        Raises
        ------
        QueueFull, ShuttingDown
            From the batcher (503).
        BackendError
            The backend failed (502/503/504).
        BudgetRefused
            The ledger refused the release (403).
        """
        vecs: dict[str, NDArray[np.float32]] = {}
        toks: dict[str, int] = {}
        todo_ids, todo_texts = [], []
        for rid, text in zip(ids, texts, strict=True):
            hit = self.cached(model, dims, rid)
            if hit is not None:
                vecs[rid], toks[rid] = hit
            else:
                todo_ids.append(rid)
                todo_texts.append(text)
        self.metrics.cache_hits += len(ids) - len(todo_ids)
        if todo_ids:
            work = _Work(model, dims, todo_ids, todo_texts)
            got: Embedded = await self.batchers[model.backend].submit(work, len(todo_ids))
            vecs.update(got.vectors)
            toks.update(got.tokens)
        return Embedded(vecs, toks)

    # ---- one batch ---------------------------------------------------------------------------
    async def _process(self, jobs: list[Job]) -> None:
        works: list[_Work] = [j.payload for j in jobs]
        backend = self.backends[works[0].model.backend]
        texts: dict[str, str] = {}
        for w in works:
            texts.update(zip(w.ids, w.texts, strict=True))
        order = list(texts)
        try:
            X, counts = await backend.embed([texts[r] for r in order])
        except BackendError as exc:
            for j in jobs:
                _resolve(j.future, exc=exc)
            return
        row = {r: i for i, r in enumerate(order)}
        tokens = dict(zip(order, counts, strict=True))
        groups: dict[tuple[str, int | None], list[Job]] = {}
        for j in jobs:
            w = j.payload
            groups.setdefault((w.model.name, w.dims), []).append(j)
        loop = asyncio.get_running_loop()
        for group in groups.values():
            await self._protect_group(loop, backend, group, X, row, tokens)

    async def _protect_group(
        self,
        loop: asyncio.AbstractEventLoop,
        backend: Backend,
        jobs: list[Job],
        X: NDArray[np.float32],
        row: dict[str, int],
        tokens: dict[str, int],
    ) -> None:
        w0: _Work = jobs[0].payload
        model, dims = w0.model, w0.dims
        ids = list(dict.fromkeys(r for j in jobs for r in j.payload.ids))
        Xg = X[[row[r] for r in ids]]
        try:
            Y = await loop.run_in_executor(
                self._protect, self._release, model, dims, backend.name, ids, Xg
            )
        except BudgetRefused as exc:
            if len(jobs) > 1:  # find the requests that pass on their own
                for j in jobs:
                    await self._protect_group(loop, backend, [j], X, row, tokens)
                return
            _resolve(jobs[0].future, exc=exc)
            return
        except Exception as exc:
            for j in jobs:
                _resolve(j.future, exc=exc)
            return
        vecs = dict(zip(ids, Y, strict=True))
        if self.keyed:
            self._store(model, dims, vecs, tokens)
        for j in jobs:
            r_ids = j.payload.ids
            _resolve(j.future, Embedded({r: vecs[r] for r in r_ids}, {r: tokens[r] for r in r_ids}))

    def _release(
        self,
        model: ModelConfig,
        dims: int | None,
        backend: str,
        ids: list[str],
        X: NDArray[np.float32],
    ) -> NDArray[np.float32]:
        """Protect (or project) one group; runs on the protect thread, inside the ledger."""
        mech = model.mechanism(dims)
        if model.treatment == "none" or mech is None:
            return np.ascontiguousarray(X, dtype=np.float32)
        if model.treatment == "project":
            assert isinstance(mech, PrivateProjection)
            return np.asarray(mech.project(X), dtype=np.float32)
        key = self._bkeys[backend] if self.keyed else None
        kid = self._bkey_ids[backend] if self.keyed else None

        def run() -> NDArray[np.float32]:
            if key is not None:
                return np.asarray(mech.privatize(X, ids=ids, key=key), dtype=np.float32)
            return np.asarray(mech.privatize(X), dtype=np.float32)

        if self._ledger is None:
            return run()
        from ..ledger import BudgetExceeded

        try:
            with self._ledger.release(ids, _LedgerView.of(mech, X.shape[1]), key_id=kid) as rel:
                Y = run()
                rel.add_outputs(ids, Y)
        except BudgetExceeded:
            raise BudgetRefused() from None
        return Y

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
