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
from privembed.audit import audit, max_certifiable_epsilon


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
    args = ap.parse_args(argv)
    names = [s for s in args.mechanisms.split(",") if s]
    eps_list = [float(s) for s in args.eps.split(",") if s]
    dims = [int(s) for s in args.dims.split(",") if s]
    n = args.samples
    print(
        f"# privembed audit{' (raw: renormalize=False)' if args.raw else ''}: N = {n:,} per side ({n // 2:,} test), 95% confidence; "
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
                r = audit(m, dim=d, samples=n, power=True, rng=args.seed + cell)
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
