"""The measurement behind :func:`~privembed.evaluation.modes.advise_modes`: the clean top
sets every probe shares, one (mode, noise law) probed at an epsilon over ``draws`` noise
draws, the bisection on the epsilon grid, the sealed mode's cost, the k' law at a larger
corpus (:meth:`_Search.predict`), and the attacks and threat verdicts at a setting."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.rng import spawn
from ..mechanisms import Mechanism, build_mechanism
from .advice import implied_ldp
from .cost import Budget, Rates, query_cost, sealed_cost
from .modes_result import (
    DEPTH_SHARE,
    TOP_K,
    DepthPrediction,
    ModesAdvice,
    ModeSetting,
    QueryData,
)
from .threats import (
    AttackEvidence,
    ThreatVerdict,
    judge,
    judge_sealed,
    judge_structural,
    threats_for,
)

_Z95 = 1.959963984540054


def _unit(A: Any) -> NDArray[np.float64]:
    A = np.asarray(A, dtype=np.float64)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


class _Clean:
    """What every probe shares: unit documents and queries, clean scores and the clean top k."""

    def __init__(self, D: NDArray[np.float64], Q: NDArray[np.float64]) -> None:
        self.D = D
        self.Q = Q
        S = Q @ D.T
        self.k = min(TOP_K, D.shape[0] - 1)
        self.top = np.argpartition(-S, self.k - 1, axis=1)[:, : self.k]


def _ranks(clean: _Clean, P: NDArray[np.float64]) -> NDArray[np.int64]:
    """1-based rank by protected score P (nq, n) of each query's clean top k (ties against)."""
    own = np.take_along_axis(P, clean.top, axis=1)
    R = np.empty(own.shape, dtype=np.int64)
    step = max(1, (1 << 24) // max(1, P.shape[1] * own.shape[1]))  # ~16M comparisons a block
    for s in range(0, P.shape[0], step):  # documents scoring >= each own score, itself included
        blk = P[s : s + step]
        R[s : s + step] = (blk[:, None, :] >= own[s : s + step, :, None]).sum(axis=2)
    return R


def _recall_curve(
    R: NDArray[np.int64], depths: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean recall per depth and the lower end of its 95% interval over queries."""
    per = (R[:, :, None] <= depths[None, None, :]).mean(axis=1)  # (nq, nd)
    mean = per.mean(axis=0)
    se = per.std(axis=0, ddof=1) / math.sqrt(per.shape[0]) if per.shape[0] > 1 else mean * 0
    return mean, mean - _Z95 * se


@dataclass
class _Probe:
    ok: bool
    utility: float
    low: float
    depth: int
    mech: Mechanism
    Y: NDArray[np.float64]


class _ModeRunner:
    """Builds a mode's mechanism at an epsilon and measures ``draws`` noise draws."""

    def __init__(
        self,
        mode: str,
        name: str,
        params: Mapping[str, Any],
        clean: _Clean,
        *,
        floor: float,
        metric: str,
        max_depth: int,
        seed: int,
        basis: Any,
        draws: int = 1,
    ) -> None:
        self.mode, self.name, self.params = mode, name, dict(params)
        self.clean, self.floor, self.metric = clean, floor, metric
        self.max_depth, self.seed, self.basis = max_depth, seed, basis
        n = clean.D.shape[0]
        hi = clean.k if mode == "plain" else min(max_depth, n)
        self.depths = np.arange(clean.k, max(hi, clean.k) + 1, dtype=np.int64)
        self.error = ""
        self.seeds = [seed + 7919 * j for j in range(draws)]

    def build(self, eps: float) -> Mechanism:
        if self.mode == "subspace+rerank":
            from ..mechanisms.subspace import SubspaceMechanism

            return SubspaceMechanism(basis=self.basis, epsilon=eps, noise=self.name, **self.params)
        return build_mechanism(self.name, epsilon=eps, **self.params)

    def probe(self, eps: float) -> _Probe | None:
        try:
            m = self.build(eps)
        except ValueError as e:  # e.g. a subspace too small for the law at this epsilon
            self.error = str(e)
            return None
        c = self.clean
        means, lows, first = [], [], None
        for seed in self.seeds:  # independent noise draws: the floor must hold on each
            if self.mode == "query":
                Y = _unit(m.privatize(c.Q, rng=seed))
                P = Y @ c.D.T
            elif self.mode == "subspace+rerank":
                Y = _unit(m.privatize(c.D, rng=seed))
                P = _unit(m.public_transform(c.Q)) @ Y.T
            else:
                Y = _unit(m.privatize(c.D, rng=seed))
                P = c.Q @ Y.T
            first = Y if first is None else first
            if self.metric == "mean_cosine":  # plain only
                cos = np.einsum("ij,ij->i", Y, c.D)
                mean = np.array([cos.mean()])
                low = mean - _Z95 * float(cos.std(ddof=1)) / math.sqrt(cos.size)
            else:
                mean, low = _recall_curve(_ranks(c, P), self.depths)
            means.append(mean)
            lows.append(low)
        assert first is not None
        mean_c = np.mean(means, axis=0)
        low_c = np.min(lows, axis=0)
        hit = np.flatnonzero(low_c >= self.floor)
        i = int(hit[0]) if hit.size else len(low_c) - 1
        depth = c.k if self.metric == "mean_cosine" else int(self.depths[i])
        return _Probe(bool(hit.size), float(mean_c[i]), float(low_c[i]), depth, m, first)


def _search(runner: _ModeRunner, grid: Sequence[float]) -> tuple[float, _Probe | None, int]:
    """Smallest grid epsilon whose probe meets the floor (bisection on indices), else the top
    (None: the mechanism cannot be built there)."""
    probes = 1
    top = runner.probe(grid[-1])
    if top is None or not top.ok:
        return grid[-1], top, probes
    lo, hi, best = -1, len(grid) - 1, top  # invariant: grid[hi] meets, grid[lo] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = runner.probe(grid[mid])
        probes += 1
        if p is not None and p.ok:
            hi, best = mid, p
        else:
            lo = mid
    return grid[hi], best, probes


def _linkage(
    name: str, Y: NDArray[np.float64], ref: NDArray[np.float64], max_records: int
) -> AttackEvidence:
    """Top-1 linkage of Y to its originals ``ref`` (row i from row i), with the clean check."""
    from ..attacks import LinkageAttack

    n = Y.shape[0]
    if n > max_records:
        idx = np.sort(spawn(0, 1)[0].choice(n, max_records, replace=False))
        Y, ref = Y[idx], ref[idx]
    att = LinkageAttack(ks=(1,))
    at, clean = att.score(Y, ref).result(), att.score(ref, ref).result()
    ev = AttackEvidence.from_results(at, clean)
    return ev if name == "linkage" else AttackEvidence(name, *_fields(ev))


def _verdicts(
    mode: str,
    evidence: Sequence[AttackEvidence],
    *,
    mechanism: str,
    epsilon: float | None,
    dim: int,
    model: str | None,
    mech: Mechanism | None = None,
) -> list[ThreatVerdict]:
    """Each threat's verdict: the attacks run now, never weaker than the project's stored
    evidence for the same mechanism, epsilon, mode and dimension
    (:func:`~privembed.evaluation.evidence.with_stored_evidence`)."""
    from .evidence import with_stored_evidence

    cos = getattr(mech, "expected_cosine", None)
    cosine = cos(dim) if callable(cos) and mode in ("plain", "rerank") else None
    out: dict[str, ThreatVerdict] = {}
    for t in sorted(threats_for(mode), key=lambda t: t.implied_by is not None):
        if t.defended_by == "deployment":
            v = judge_structural(t, keyed=True, ledger=True)
            out[t.name] = ThreatVerdict(
                t, v.verdict, v.reason + "; only when indexed with a key (--key-file) and a ledger"
            )
        elif t.implied_by is not None:  # quotes the stronger attacker's final verdict
            v = judge(t, evidence)
            stronger = out.get(t.implied_by)
            if stronger is not None:
                v = ThreatVerdict(
                    t,
                    v.verdict,
                    "no attack without auxiliary data is implemented; against "
                    f"{stronger.threat.title} (who holds more): {stronger.verdict}",
                )
            out[t.name] = v
        else:
            out[t.name] = with_stored_evidence(
                judge(t, evidence), mechanism=mechanism, epsilon=epsilon, mode=mode, dim=dim,
                model=model, cosine=cosine,
            )  # fmt: skip
    return [out[t.name] for t in threats_for(mode)]


@dataclass(frozen=True)
class _Search:
    """What the search of every (mode, noise law) shares: the data, the floor and the limits."""

    clean: _Clean
    qd: QueryData
    floor: float
    min_cosine: float | None
    budget: Budget
    rates: Rates
    seed: int
    draws: int
    grid: Sequence[float]
    linkage_records: int
    params: Mapping[str, Mapping[str, Any]]
    basis: Any
    model: str | None = None

    def run(
        self, modes: Sequence[str], mechanisms: Sequence[str], say: Callable[[str], None]
    ) -> tuple[list[ModeSetting], dict[tuple[str, str], tuple[Mechanism, Any]]]:
        """The setting of every (mode, law), and the release found for each that has one."""
        out: list[ModeSetting] = []
        releases: dict[tuple[str, str], tuple[Mechanism, Any]] = {}
        for mode in modes:
            if mode == "sealed":  # no noise law: one setting
                say("sealed: the cost of fetching every payload")
                out.append(self.sealed())
                continue
            for name in mechanisms:
                say(f"{mode} / {name}: searching the smallest epsilon")
                setting, p = self.setting(mode, name)
                out.append(setting)
                if p is not None:
                    releases[(mode, name)] = (p.mech, p.Y)
        return out, releases

    def _runner(
        self,
        mode: str,
        name: str,
        clean: _Clean,
        floor: float,
        metric: str,
        max_depth: int,
        seed: int,
    ) -> _ModeRunner:
        """One (mode, law) on ``clean`` with this search's parameters, basis and draws."""
        return _ModeRunner(
            mode, name, self.params.get(name, {}), clean, floor=floor, metric=metric,
            max_depth=max_depth, seed=seed, basis=self.basis, draws=self.draws,
        )  # fmt: skip

    def _depth(self, setting: ModeSetting, eps: float, clean: _Clean, seed: int) -> int | None:
        """k' at which ``setting``'s (mode, law) at ``eps`` meets the recall floor on ``clean``
        (up to all of its documents) with the noise seeds of ``seed``; None: it does not."""
        n = clean.D.shape[0]
        runner = self._runner(setting.mode, setting.mechanism, clean, self.floor, "recall", n, seed)
        p = runner.probe(eps)
        return p.depth if p is not None and p.ok else None

    def predict(self, setting: ModeSetting, target: int) -> DepthPrediction | None:
        """k' of ``setting`` (at its epsilon) measured on random subsets of n/4 and n/2
        documents with the same queries and seeds, fitted as n^b with its n, and extrapolated
        to ``target`` documents (:class:`DepthPrediction`)."""
        D, Q = self.clean.D, self.clean.Q
        n = D.shape[0]
        sizes = [max(4 * TOP_K, n // 4), max(4 * TOP_K, n // 2)]
        if setting.epsilon is None or sizes[0] >= sizes[1] or sizes[1] >= n:
            return None
        eps = float(setting.epsilon)
        pick = spawn(self.seed + 104729, 1)[0].permutation(n)
        depths = []
        for m in sizes:
            depth = self._depth(setting, eps, _Clean(D[np.sort(pick[:m])], Q), self.seed)
            if depth is None:
                return None
            depths.append(depth)
        depths.append(setting.depth)
        ns = [*sizes, n]
        # k' at n over independent draws: its relative spread widens the range
        again = [self._depth(setting, eps, self.clean, self.seed + 15485863 * j) for j in (1, 2)]
        seen = [setting.depth, *(k for k in again if k is not None)]
        spread = (max(seen) - min(seen)) / float(np.median(seen))
        b = [math.log(depths[i + 1] / depths[i]) / math.log(ns[i + 1] / ns[i]) for i in (0, 1)]
        slope = math.log(depths[2] / depths[0]) / math.log(ns[2] / ns[0])
        grow = target / n
        pred = min(target, round(depths[2] * grow**slope))
        low = min(target, math.floor(depths[2] * grow ** min(b) * (1 - spread)))
        high = min(target, math.ceil(depths[2] * grow ** max(1.0, max(b)) * (1 + spread)))
        store_dim = setting.subspace_k or D.shape[1]
        low, high = min(low, pred), max(high, pred)

        def cost(depth: int) -> int:
            return query_cost(
                setting.mode, n=target, d=D.shape[1], store_dim=store_dim, depth=max(1, depth),
                rates=self.rates,
            ).bytes  # fmt: skip

        return DepthPrediction(
            setting.mode, setting.mechanism, float(setting.epsilon), tuple(ns), tuple(depths),
            slope, (min(b), max(b)), target, pred, low, high, cost(pred), spread, cost(low),
            cost(high),
        )  # fmt: skip

    def sealed(self) -> ModeSetting:
        """The sealed mode: exact, so the floor is met; whether fetching all ``n`` payloads
        per query fits the budget decides whether it is available."""
        from ..keys.payload import payload_size

        n, d = self.clean.D.shape
        cost = sealed_cost(n=n, d=d, rates=self.rates, client_cache=self.budget.client_cache)
        fits = self.budget.sealed_fits(cost)
        fetch = cost.sync_bytes or cost.bytes
        when = "once per session" if cost.sync_bytes else "on every query"
        notes = [] if fits else [
            f"fetching all {n:,} payloads ({fetch / 1e6:.2f} MB {when}) is over the budget "
            f"({self.budget.text()})"
        ]  # fmt: skip
        return ModeSetting(
            mode="sealed",
            mechanism="aes-gcm",
            epsilon=None,
            meets_floor=fits,
            utility=1.0,
            utility_low=1.0,
            metric="recall",
            depth=n,
            probes=0,
            config={"mode": "sealed", "cipher": "AES-256-GCM", "padding": "padme"},
            guarantee="sealed (AES-256-GCM, padded payloads): no vector in the store",
            guarantee_short="sealed: no vector in the store",
            payload_bytes_per_query=n * payload_size(d),
            decryptions_per_query=n,
            verdicts=[judge_sealed(t) for t in threats_for("sealed")] if fits else [],
            notes=notes,
            cost=cost,
            depth_cap=n if fits else 0,
        )

    def setting(self, mode: str, name: str) -> tuple[ModeSetting, _Probe | None]:
        """The smallest epsilon of one (mode, law) meeting the floor, or the nearest point, and
        its probe (None: the mechanism cannot be built at the top of the grid)."""
        if mode == "plain" and self.min_cosine is not None:  # the floor is on the mean cosine
            metric, floor = "mean_cosine", float(self.min_cosine)
        else:
            metric, floor = "recall", self.floor
        n, d = self.clean.D.shape
        store_dim = d
        if mode == "subspace+rerank" and self.basis is not None:
            # the mechanism keeps k <= m components: the budget is checked at m (an upper bound)
            store_dim = min(d, int(self.basis.components.shape[0]))
        cap = min(
            max(TOP_K, n // DEPTH_SHARE),
            self.budget.depth_cap(mode, n=n, d=d, store_dim=store_dim, rates=self.rates),
        )
        if cap < self.clean.k:
            note = (
                f"not available: the budget ({self.budget.text()}) does not pay for "
                f"k' = {self.clean.k} at n = {n:,}"
            )
            return _unavailable(mode, name, metric, 0, note), None
        runner = self._runner(mode, name, self.clean, floor, metric, cap, self.seed)
        eps, p, probes = _search(runner, self.grid)
        if p is None:
            return _unavailable(mode, name, metric, probes, f"not available: {runner.error}"), None
        setting = _setting(
            mode, name, eps, p, probes, runner, self.qd, self.linkage_records, self.model
        )
        setting.at_grid_bottom = p.ok and eps == self.grid[0]
        setting.depth_cap = cap if mode != "plain" else self.clean.k
        held = setting.subspace_k if setting.subspace_k else store_dim
        setting.cost = query_cost(
            mode, n=n, d=d, store_dim=held, depth=setting.depth, rates=self.rates
        )
        return setting, p

    def advice(self, settings: list[ModeSetting], max_ldp_epsilon: float | None) -> ModesAdvice:
        """The advice made of the settings found."""
        n, d = self.clean.D.shape
        return ModesAdvice(
            floor=self.floor,
            min_cosine=None if self.min_cosine is None else float(self.min_cosine),
            budget=self.budget,
            queries=self.qd.source,
            n=n,
            d=d,
            settings=settings,
            max_ldp_epsilon=max_ldp_epsilon,
            seed=self.seed,
            model=self.model,
        )


def _unavailable(mode: str, name: str, metric: str, probes: int, note: str) -> ModeSetting:
    """The row of a (mode, law) that cannot be measured (NaN utility, the reason as its note)."""
    return ModeSetting(mode, name, None, False, math.nan, math.nan, metric, 0, probes, notes=[note])


def _attack_recommended(
    result: ModesAdvice,
    releases: Mapping[tuple[str, str], tuple[Mechanism, Any]],
    attacks: Sequence[Any],
    D: NDArray[np.float64],
    seed: int,
    say: Callable[[str], None],
) -> None:
    """Run the extra ``attacks`` at the recommended setting only; their evidence joins its
    threat verdicts."""
    r = result.recommended
    if r is not None and r.mode == "sealed":
        if attacks:
            say("sealed: no attack on the store applies (it holds ciphertext only)")
        return
    if attacks and r is not None:
        mech, Y = releases[(r.mode, r.mechanism)]
        say(f"{r.label}: running {len(attacks)} more attack(s) at the recommended setting")
        r.evidence.extend(_run_attacks(attacks, D, mech, Y, seed))
        r.verdicts = _verdicts(
            r.mode, r.evidence, mechanism=r.mechanism, epsilon=r.epsilon, dim=D.shape[1],
            model=result.model, mech=mech,
        )  # fmt: skip


def _run_attacks(
    attacks: Sequence[Any], D: NDArray[np.float64], mech: Mechanism, Y: Any, seed: int
) -> list[AttackEvidence]:
    """Each attack's strength check on the clean vectors and its result at the setting, as
    evidence: a metric with ``check(release) -> (columns, StrengthCheck)`` (e.g.
    :class:`~privembed.evaluation.TokenLeakage`)."""
    from .privacy import CellRelease, Unprotected

    clean_rng, rng = spawn(seed, 2)
    ident = Unprotected()
    out = []
    for a in attacks:
        _, clean = a.check(CellRelease(ident, D, ident.privatize(D), clean_rng))
        _, at = a.check(CellRelease(mech, D, np.asarray(Y), rng))
        low, high = at.chance + at.excess_low, at.chance + at.excess_high
        out.append(
            AttackEvidence(
                at.attack,
                at.statistic,
                at.value,
                at.chance,
                min(low, at.value),
                max(high, at.value),
                clean.excess_low,
                clean.value,
            )
        )
    return out


def _setting(
    mode: str,
    name: str,
    eps: float,
    p: _Probe,
    probes: int,
    runner: _ModeRunner,
    qd: QueryData,
    linkage_records: int,
    model: str | None = None,
) -> ModeSetting:
    from ..keys.payload import payload_size

    m = p.mech
    composed = getattr(m, "composed_guarantee", None)
    g = composed() if callable(composed) else m.guarantee
    ldp = implied_ldp(g)
    clean = runner.clean
    evidence: list[AttackEvidence] = []
    notes: list[str] = []
    if mode == "query":
        evidence.append(_linkage("linkage", p.Y, clean.Q, linkage_records))
        notes.append(
            "protects queries only: the store holds the documents in the clear; the linkage "
            "attack links protected queries to candidate queries"
        )
    elif mode == "subspace+rerank":
        ref = _unit(m.public_transform(clean.D))
        ev = _linkage("linkage_basis", p.Y, ref, linkage_records)
        evidence.append(ev)
        # a candidate holder estimates the basis by PCA of the candidates; measured with the
        # true basis, an upper bound on what such an attacker gets
        evidence.append(AttackEvidence("linkage", *_fields(ev)))
        notes.append(
            "candidate-holder linkage measured with the basis (an attacker can estimate it by "
            "PCA of the candidates): an upper bound"
        )
    else:
        evidence.append(_linkage("linkage", p.Y, clean.D, linkage_records))
    k_sub = getattr(m, "k", None) if mode == "subspace+rerank" else None
    basis = runner.basis
    if k_sub is not None and k_sub <= 2 and getattr(basis, "guarantee", None) is not None:
        notes.append(
            f"the DP-PCA basis of {clean.D.shape[0]} records keeps k = {k_sub} component(s) "
            "above its noise floor: too few records for DP-PCA at this epsilon_p; give public "
            "embeddings (--basis)"
        )
    reranked = mode != "plain"
    depth = p.depth if reranked else clean.k
    return ModeSetting(
        mode=mode,
        mechanism=name,
        epsilon=float(eps) if p.ok else None,
        meets_floor=p.ok,
        utility=p.utility,
        utility_low=p.low,
        metric=runner.metric,
        depth=depth,
        probes=probes,
        config=dict(m.config) if hasattr(m, "config") else {},
        guarantee=g.describe(),
        guarantee_short=g.short(),
        ldp_epsilon=None if ldp is None else ldp[0],
        ldp_delta=None if ldp is None else ldp[1],
        subspace_k=k_sub,
        payload_bytes_per_query=depth * payload_size(clean.D.shape[1])
        if mode in ("rerank", "subspace+rerank")
        else 0,
        decryptions_per_query=depth if mode in ("rerank", "subspace+rerank") else 0,
        evidence=evidence,
        verdicts=_verdicts(
            mode,
            evidence,
            mechanism=name,
            epsilon=float(eps),
            dim=clean.D.shape[1],
            model=model,
            mech=m,
        )
        if p.ok
        else [],
        notes=notes if p.ok else [*notes, f"nearest point: epsilon {eps:.4g}, top of the grid"],
    )


def _fields(e: AttackEvidence) -> tuple[str, float, float, float, float, float, float | None]:
    return (e.statistic, e.value, e.blind, e.low, e.high, e.clean_excess_low, e.clean)
