# ruff: noqa: E402  (BLAS thread settings must precede the numpy import)
"""Audit the shipped mechanisms at the grid of issue 21 and print the table for the docs.

Run (one run; about 25 minutes on 2 shared cores at the defaults)::

    nice -n 10 python benchmarks/bench_audit.py                       # the full grid, N = 1e6
    python benchmarks/bench_audit.py --samples 20000 --dims 2,16      # a quick look
    python benchmarks/bench_audit.py --json audit.json                # also keep every result

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
private than claimed for this pair -- its exact value is shown).

``--raw`` audits the noise law before renormalisation instead (``renormalize=False``).
``--planted`` audits the four planted bugs of issue 21 instead of the grid (defined below, as
in ``tests/test_audit.py``): a Laplace radius with Gamma shape d - 1, a Mahalanobis Sigma
normalised to trace 1 instead of d, a halved Gaussian sigma, and the classic calibration
presented as (50, 1e-5)-LDP.

Epsilons of metric claims (Laplace, Mahalanobis, Purkayastha) are per unit of their metric: the
pair's bound divided by its distance (2 for l2, 2/sqrt(Sigma_max) for Mahalanobis, pi for
angles). Seconds are wall-clock on whatever else the machine was doing.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import math
import platform
import sys
from typing import Any

import numpy as np

from privembed import get_mechanism
from privembed.accounting import ApproxDP
from privembed.audit import audit, max_certifiable_epsilon
from privembed.mechanisms import GaussianMechanism, LaplaceMechanism, MahalanobisMechanism


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


def planted(n: int, seed: int) -> int:
    """Audit the planted bugs; one row each."""
    half = [1.0, 0.0] * 8
    cases = [
        ("Laplace radius Gamma(d-1)", GammaShapeMinusOne(epsilon=1.0), 2),
        ("Laplace radius Gamma(d-1)", GammaShapeMinusOne(epsilon=1.0), 16),
        ("Laplace radius Gamma(d-1)", GammaShapeMinusOne(epsilon=1.0), 384),
        ("Mahalanobis Sigma trace 1", TraceOneMahalanobis(epsilon=1.0, mask=[1.0, 0.0]), 2),
        ("Mahalanobis Sigma trace 1", TraceOneMahalanobis(epsilon=1.0, mask=half), 16),
        ("Gaussian sigma halved", HalfSigmaGaussian(epsilon=1.0, delta=1e-5), 16),
        ("Gaussian sigma halved", HalfSigmaGaussian(epsilon=4.0, delta=1e-5), 2),
        (
            "classic sigma as (50, 1e-5)",
            ClassicAsClaimed(epsilon=50.0, delta=1e-5, calibration="classic"),
            16,
        ),
    ]
    head = (
        "| planted bug | d | claimed ε | audited ≥ | sampling | white-box | white-box finding "
        "| N per side | s |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    caught = 0
    for i, (label, m, d) in enumerate(cases):
        r = audit(m, dim=d, samples=n, rng=seed + i)
        wb = r.whitebox
        assert wb is not None
        unit = "" if r.metric is None else "/unit"
        sampling = "violation" if r.sampling_violation else "-"
        caught += r.verdict == "violation"
        print(
            f"| {label} | {d} | {r.claimed_epsilon:g}{unit} | {r.epsilon_lower:.3f} | {sampling} "
            f"| {wb.verdict} | {wb.reason} | {r.samples:.0e} | {r.seconds:.0f} |",
            flush=True,
        )
    print(f"\n{caught} of {len(cases)} planted bugs caught", file=sys.stderr)
    return 0 if caught == len(cases) else 1


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
        "--noise", default="seeded", help="seeded|fresh: the privatize randomness path audited"
    )
    args = ap.parse_args(argv)
    if args.planted:
        return planted(args.samples, args.seed)
    names = [s for s in args.mechanisms.split(",") if s]
    eps_list = [float(s) for s in args.eps.split(",") if s]
    dims = [int(s) for s in args.dims.split(",") if s]
    n = args.samples
    print(
        f"# privembed audit{' (raw: renormalize=False)' if args.raw else ''}, {args.noise} "
        f"noise: N = {n:,} per side ({n // 2:,} test), 95% confidence; "
        f"ceiling ln-N: {max_certifiable_epsilon(n - n // 2):.2f} nats per pair"
    )
    print(f"# python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}\n")
    head = (
        "| mechanism | d | claimed ε | audited ≥ | audited / claimed | confidence | "
        "white-box (ε estimate) | N per side | N for ½ claim | s |"
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
                r = audit(m, dim=d, samples=n, power=True, noise=args.noise, rng=args.seed + cell)
                wb = r.whitebox
                wb_text = "-" if wb is None else f"{wb.verdict} ({wb.epsilon_estimate:.4g})"
                unit = "" if r.metric is None else "/unit"
                claim = f"{r.claimed_epsilon:g}{unit}"
                print(
                    f"| {name} | {d} | {claim} | {r.epsilon_lower:.3f} | {r.ratio:.2f} | "
                    f"{r.confidence:.0%} | {wb_text} | {r.samples:.0e} | "
                    f"{_n(r)} | {r.seconds:.0f} |",
                    flush=True,
                )
                rows.append(r.to_dict())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    bad = [r for r in rows if r["verdict"] != "consistent"]
    print(f"\n{len(rows)} cells; {len(bad)} with a violation verdict", file=sys.stderr)
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
