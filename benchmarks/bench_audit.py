# ruff: noqa: E402  (BLAS thread settings must precede the numpy import)
"""Audit the shipped mechanisms at the grid of issue 21 and print the table for the docs.

Run (one run; about 25 minutes on 2 shared cores at the defaults)::

    nice -n 10 python benchmarks/bench_audit.py                       # the full grid, N = 1e6
    python benchmarks/bench_audit.py --samples 20000 --dims 2,16      # a quick look
    python benchmarks/bench_audit.py --json audit.json                # also keep every result
    python benchmarks/bench_audit.py --planted                        # the planted bugs

For each mechanism (Gaussian with analytic calibration at delta = 1e-5, l2 Laplace, Mahalanobis
with a half mask -- dimensions d/2.. closed -- and the default mask_delta, Purkayastha), claimed
epsilon and dimension d it runs :func:`privembed.audit.audit` on the release as shipped
(renormalisation on) with the likelihood-ratio score: ``--samples`` releases of each input of
the worst-case pair (antipodal unit vectors; for Mahalanobis along the largest-variance axis),
half of them to choose the threshold, half to count its errors; the lower bound holds with 95%
confidence. The white-box check uses ``min(N, max(2e4, 2**24 / d))`` noise draws. "N for 1/2"
is the number of draws per side at which the *expected* bound reaches half the claim, from the
exact law of the score of a correct mechanism (``samples_needed``; "≥" where that law is the
one before renormalisation, which renormalising can only make harder to audit); "unreachable"
where even that law, with no sampling error, stays below half the claim (the release is more
private than claimed for this pair -- its exact value is shown). "verdict" is the audit's:
consistent, violation, or inconclusive (the white box's interval reaches past 1.25 x the claim
and the sampling power is short of it too, or the claim is above the ceiling).

``--raw`` audits the noise law before renormalisation instead (``renormalize=False``);
``--noise fresh|keyed`` (with ``--generator philox|aes``) audits another randomness path.
``--planted`` audits the planted bugs instead of the grid (defined below, as in
``tests/test_audit.py`` and ``tests/test_audit_verdicts.py``): issue 21's four (a Laplace radius
with Gamma shape d - 1, a Mahalanobis Sigma normalised to trace 1 instead of d, a halved
Gaussian sigma, the classic calibration presented as (50, 1e-5)-LDP) and issue 24's (sigma x
0.8 on the keyed path only -- Philox, or AES only --, a sensitivity attribute of 1 with sigma
calibrated to 2, a Mahalanobis that skips its smoothing, a Purkayastha angle table of 1.25
epsilon, and a Laplace radius scale of 0.8 / epsilon audited without the white box at N = 100),
each at its own N.

Epsilons of metric claims (Laplace, Mahalanobis, Purkayastha) are per unit of their metric: the
pair's bound divided by its distance (2 for l2, 2/sqrt(Sigma_max) for Mahalanobis, pi for
angles). Seconds are wall-clock on whatever else the machine was doing.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import contextlib
import json
import math
import platform
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

import privembed.release.core as release_module
from privembed import get_mechanism
from privembed.audit import VERDICTS, audit, max_certifiable_epsilon
from privembed.core.accounting import ApproxDP
from privembed.core.rng import NoiseSource
from privembed.mechanisms import (
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    PurkayasthaMechanism,
)
from privembed.mechanisms import mahalanobis as mahalanobis_module
from privembed.mechanisms.purkayastha import AngleTable


class GammaShapeMinusOne(LaplaceMechanism):
    """Planted: Laplace radius drawn with Gamma shape d - 1 instead of d."""

    def _perturb(self, X: Any, source: Any) -> Any:
        n, d = X.shape
        u = source.normal(n, d)
        r = source.gamma(float(d - 1), n) / self.epsilon
        u *= (r / np.linalg.norm(u, axis=1))[:, None]
        return X + u


class TraceOneMahalanobis(MahalanobisMechanism):
    """Planted: samples with Sigma normalised to trace 1 while claiming trace d."""

    def _perturb(self, X: Any, source: Any) -> Any:
        Y = super()._perturb(X, source)
        return X + (Y - X) / math.sqrt(X.shape[1])


class HalfSigmaGaussian(GaussianMechanism):
    """Planted: noise with half the calibrated sigma."""

    def _perturb(self, X: Any, source: Any) -> Any:
        noise = source.normal(*X.shape)
        noise *= self.sigma / 2.0
        return X + noise


class ClassicAsClaimed(GaussianMechanism):
    """Planted: the classic sigma presented as the requested (epsilon, delta)."""

    @property
    def guarantee(self) -> Any:
        return ApproxDP(self.epsilon, self.delta, neighbouring="any two unit vectors")


class ScaledLaplace(LaplaceMechanism):
    """Planted: Laplace radius Gamma(d, 0.8/epsilon) -- (1.25 epsilon)-d_X claimed as epsilon."""

    def _perturb(self, X: Any, source: Any) -> Any:
        n, d = X.shape
        u, g = source.normal_gamma(n, d, float(d))
        u *= (0.8 * g / self.epsilon / np.sqrt(np.einsum("ij,ij->i", u, u)))[:, None]
        return X + u


class _WideTable(AngleTable):
    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(1.25 * epsilon, d)


class TableBugPurkayastha(PurkayasthaMechanism):
    """Planted: the sampler's angle table is the law of 1.25 epsilon."""

    def angle_table(self, d: int) -> AngleTable:
        return _WideTable(self.epsilon, d)


class _ScaledNormals(NoiseSource):
    """Normals 0.8 x what they should be."""

    def __init__(self, inner: NoiseSource) -> None:
        self.inner = inner

    def normal(self, n: int, k: int) -> Any:
        return 0.8 * self.inner.normal(n, k)

    def uniform(self, n: int, k: int) -> Any:
        return self.inner.uniform(n, k)

    def gamma(self, shape: float, n: int) -> Any:
        return self.inner.gamma(shape, n)

    def normal_gamma(self, n: int, k: int, shape: float) -> Any:
        u, g = self.inner.normal_gamma(n, k, shape)
        return 0.8 * u, g


@contextlib.contextmanager
def _keyed_sigma_bug(only: str | None) -> Iterator[None]:
    """Planted: sigma x 0.8 on the keyed release path only (``only``: that generator only)."""
    real = release_module.keyed_source

    def buggy(key: bytes, tags: Any, *, generator: str = "philox") -> Any:
        src = real(key, tags, generator=generator)
        return src if only not in (None, generator) else _ScaledNormals(src)

    release_module.keyed_source = buggy  # type: ignore[assignment]
    try:
        yield
    finally:
        release_module.keyed_source = real


@contextlib.contextmanager
def _no_smoothing() -> Iterator[None]:
    """Planted: the Mahalanobis mechanism skips its smoothing (Sigma and its diagonal agree)."""
    real = mahalanobis_module.smooth_covariance
    mahalanobis_module.smooth_covariance = lambda s, lam: s  # type: ignore[assignment]
    try:
        yield
    finally:
        mahalanobis_module.smooth_covariance = real


def _wrong_sensitivity() -> GaussianMechanism:
    m = GaussianMechanism(epsilon=2.0, delta=1e-5)
    m.sensitivity = 1.0  # sigma stays calibrated to 2
    return m


def planted(n: int, seed: int) -> int:
    """Audit the planted bugs; one row each. Issue 24's keyed and table bugs are audited at
    smaller N (keyed AES draws cost ~0.15 ms a row here)."""
    half = [1.0, 0.0] * 8
    nk = min(n, 50_000)
    none = contextlib.nullcontext
    cases: list[tuple[str, Any, int, int, dict[str, Any], Any]] = [
        ("Laplace radius Gamma(d-1)", lambda: GammaShapeMinusOne(epsilon=1.0), 2, n, {}, none),
        ("Laplace radius Gamma(d-1)", lambda: GammaShapeMinusOne(epsilon=1.0), 16, n, {}, none),
        ("Laplace radius Gamma(d-1)", lambda: GammaShapeMinusOne(epsilon=1.0), 384, n, {}, none),
        (
            "Mahalanobis Sigma trace 1",
            lambda: TraceOneMahalanobis(epsilon=1.0, mask=[1.0, 0.0]),
            2,
            n,
            {},
            none,
        ),
        (
            "Mahalanobis Sigma trace 1",
            lambda: TraceOneMahalanobis(epsilon=1.0, mask=half),
            16,
            n,
            {},
            none,
        ),
        (
            "Gaussian sigma halved",
            lambda: HalfSigmaGaussian(epsilon=1.0, delta=1e-5),
            16,
            n,
            {},
            none,
        ),
        (
            "Gaussian sigma halved",
            lambda: HalfSigmaGaussian(epsilon=4.0, delta=1e-5),
            2,
            n,
            {},
            none,
        ),
        (
            "classic sigma as (50, 1e-5)",
            lambda: ClassicAsClaimed(epsilon=50.0, delta=1e-5, calibration="classic"),
            16,
            n,
            {},
            none,
        ),
        (
            "Laplace radius scale 0.8/eps, no white box",
            lambda: ScaledLaplace(epsilon=1.0),
            2,
            100,
            {"whitebox": False},
            none,
        ),
        (
            "Purkayastha table of 1.25 eps",
            lambda: TableBugPurkayastha(epsilon=1.0),
            16,
            1000,
            {},
            none,
        ),
        (
            "Purkayastha table of 1.25 eps",
            lambda: TableBugPurkayastha(epsilon=1.0),
            16,
            n,
            {},
            none,
        ),
        ("sensitivity attribute 1 (sigma for 2)", _wrong_sensitivity, 8, n, {}, none),
        (
            "Mahalanobis skips smoothing 0.5",
            lambda: MahalanobisMechanism(epsilon=1.0, mask=half, smoothing=0.5),
            16,
            n,
            {},
            _no_smoothing,
        ),
        (
            "sigma x 0.8 when keyed, seeded audit",
            lambda: GaussianMechanism(epsilon=2.0, delta=1e-5),
            8,
            nk,
            {},
            lambda: _keyed_sigma_bug(None),
        ),
        (
            "sigma x 0.8 when keyed, keyed audit (philox)",
            lambda: GaussianMechanism(epsilon=2.0, delta=1e-5),
            8,
            nk,
            {"noise": "keyed", "generator": "philox"},
            lambda: _keyed_sigma_bug(None),
        ),
        (
            "sigma x 0.8 with AES only, keyed audit (philox)",
            lambda: GaussianMechanism(epsilon=2.0, delta=1e-5),
            8,
            nk,
            {"noise": "keyed", "generator": "philox"},
            lambda: _keyed_sigma_bug("aes"),
        ),
        (
            "sigma x 0.8 with AES only, keyed audit (aes)",
            lambda: GaussianMechanism(epsilon=2.0, delta=1e-5),
            8,
            nk,
            {"noise": "keyed", "generator": "aes"},
            lambda: _keyed_sigma_bug("aes"),
        ),
    ]
    head = (
        "| planted bug | d | claimed ε | audit | audited ≥ | sampling | white-box | verdict "
        "| finding | N per side | s |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for i, (label, build, d, size, kwargs, ctx) in enumerate(cases):
        with ctx():
            r = audit(build(), dim=d, samples=size, rng=seed + i, **kwargs)
        wb = r.whitebox
        unit = "" if r.metric is None else "/unit"
        sampling = "violation" if r.sampling_violation else "-"
        path = r.noise + (f" ({r.generator})" if r.generator else "")
        print(
            f"| {label} | {d} | {r.claimed_epsilon:g}{unit} | {path} | {r.epsilon_lower:.3f} "
            f"| {sampling} | {'off' if wb is None else wb.verdict} | **{r.verdict}** "
            f"| {r.reason} | {r.samples:.0e} | {r.seconds:.0f} |",
            flush=True,
        )
    return 0


def _mechanism(name: str, eps: float, d: int, raw: bool) -> Any:
    extra = {"renormalize": False} if raw else {}
    if name == "gaussian":
        return get_mechanism("gaussian", epsilon=eps, delta=1e-5, **extra)
    if name == "mahalanobis":
        mask = np.zeros(d)
        mask[: max(1, d // 2)] = 1.0
        return get_mechanism("mahalanobis", epsilon=eps, mask=mask, **extra)
    return get_mechanism(name, epsilon=eps, **extra)


def _n(r: Any) -> str:
    x, exact = r.samples_needed, r.samples_needed_exact
    if x is None:
        return "-"
    if r.epsilon_exact is not None and r.epsilon_exact < r.claimed_epsilon / 2:
        return f"unreachable (release: {r.epsilon_exact:.3g})"
    if math.isinf(x):
        return "> 1e26"
    return ("" if exact else "≥ ") + f"{x:.1e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanisms", default="gaussian,laplace,mahalanobis,purkayastha")
    ap.add_argument("--eps", default="0.5,1,2,4")
    ap.add_argument("--dims", default="2,16,384")
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", default=None, help="write every AuditResult.to_dict() here")
    ap.add_argument("--raw", action="store_true", help="audit with renormalize=False")
    ap.add_argument("--planted", action="store_true", help="audit the planted bugs instead")
    ap.add_argument(
        "--noise", default="seeded", help="seeded|fresh|keyed: the randomness path audited"
    )
    ap.add_argument("--generator", default=None, help="philox|aes (--noise keyed)")
    args = ap.parse_args(argv)
    if args.planted:
        return planted(args.samples, args.seed)
    names = [s for s in args.mechanisms.split(",") if s]
    eps_list = [float(s) for s in args.eps.split(",") if s]
    dims = [int(s) for s in args.dims.split(",") if s]
    n = args.samples
    path = args.noise + (f" ({args.generator})" if args.generator else "")
    print(
        f"# privembed audit{' (raw: renormalize=False)' if args.raw else ''}, {path} "
        f"noise: N = {n:,} per side ({n // 2:,} test), 95% confidence; "
        f"ceiling ln-N: {max_certifiable_epsilon(n - n // 2):.2f} nats per pair"
    )
    print(f"# python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}\n")
    head = (
        "| mechanism | d | claimed ε | audited ≥ | audited / claimed | confidence | "
        "white-box (ε estimate [upper]) | verdict | N per side | N for ½ claim | s |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    rows = []
    cell = 0
    for name in names:
        for d in dims:
            for eps in eps_list:
                cell += 1
                m = _mechanism(name, eps, d, args.raw)
                r = audit(
                    m,
                    dim=d,
                    samples=n,
                    power=True,
                    noise=args.noise,
                    generator=args.generator,
                    rng=args.seed + cell,
                )
                wb = r.whitebox
                wb_text = (
                    "-"
                    if wb is None
                    else f"{wb.verdict} ({wb.epsilon_estimate:.4g} [{wb.epsilon_high:.4g}])"
                )
                unit = "" if r.metric is None else "/unit"
                claim = f"{r.claimed_epsilon:g}{unit}"
                print(
                    f"| {name} | {d} | {claim} | {r.epsilon_lower:.3f} | {r.ratio:.2f} | "
                    f"{r.confidence:.0%} | {wb_text} | {r.verdict} | {r.samples:.0e} | "
                    f"{_n(r)} | {r.seconds:.0f} |",
                    flush=True,
                )
                rows.append(r.to_dict())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    print(f"\n{len(rows)} cells: {counts}", file=sys.stderr)
    return 0 if not counts["violation"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
