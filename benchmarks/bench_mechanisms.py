# ruff: noqa: E402  (BLAS thread settings must precede the numpy import)
"""Throughput of the vector mechanisms (issue 3), beside a bare normal draw, peers and per-row loops.

Run (one run, one machine; about 8 minutes on 2 cores at the defaults)::

    python benchmarks/bench_mechanisms.py                # n = 100,000, d = 384 and 768
    python benchmarks/bench_mechanisms.py --n 20000 --dims 384 --repeats 1   # a quick look

For each d it prints a markdown table: vectors per second on an (n, d) float32 batch of unit
vectors, the time relative to just drawing n*d standard normals with numpy (the floor for any
Gaussian-based mechanism), and the per-vector speed-up over a per-row loop in the style of the
papers' reference code. Slow rows (peers and loops) are timed on a subset of rows and
extrapolated per vector; the table says how many rows were timed. The targets of issue 3 are
checked at the end (PASS/MISS).

Timing: the machine this was written on is shared, so every figure is the *CPU time of this
process* (``time.process_time``; the code timed is single-threaded except the BLAS product of
the full-covariance Mahalanobis row). Vectors/s are from the minimum over ``--repeats`` rounds;
in every round each mechanism runs right after a fresh bare draw, and the "× bare normal draw"
column is the median over rounds of that paired ratio, so both sides of a ratio see the same
load.

Per-row loops: "reference style" follows public reference implementations of these mechanisms
(e.g. the CMP/Mahalanobis code in pyPANTERA: ``numpy.random.multivariate_normal(0, I_d)`` per
vector for the direction, a gamma radius, a dense Sigma^{1/2} product; the Purkayastha loop
inverts a numerically integrated CDF per vector, as [T26] Table 11 reports for the reference
code). "lean" loops draw the same noise per row with plain ``rng.normal`` -- a per-row loop
written with care, for comparison.

Peers (benchmark-only dependencies: ``pip install diffprivlib opendp``):

* diffprivlib ``GaussianAnalytic`` and ``Laplace``, called per coordinate (their API is scalar);
  note that per-coordinate noise at (epsilon, delta) is a different, weaker, guarantee for the
  whole vector than the vector mechanisms' -- it is here for cost, as what users reach for.
* OpenDP's vector Gaussian measurement (``make_gaussian`` on ``vector_domain``), per row, at
  the same sigma as privembed's analytic calibration (OpenDP samples exactly, with a CSPRNG).

diffprivlib 0.6.6 fails to import its ``models`` package with scikit-learn >= 1.9; if the normal
import fails, only ``diffprivlib.mechanisms`` (which does not need the models) is loaded.
"""

from __future__ import annotations

import os

# One BLAS thread: the timings are CPU time, and idle BLAS threads spin (inflating the CPU time of
# the reference loops' per-row SVDs); set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import importlib
import importlib.util
import math
import platform
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy
from scipy import integrate, optimize

from privembed import (
    EmpiricalGaussianMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    PurkayasthaMechanism,
)

EPS_GAUSS, DELTA = 5.0, 1e-5
EPS_LAPLACE = 10.0
EPS_PURK = 10.0
BLOCK = 4096


@dataclass
class Row:
    label: str
    seconds_per_vector: float
    rows_timed: int
    group: str  # "floor", "privembed", "proposal", "loop", "lean", "peer"
    key: str = ""
    #: median over rounds of the time paired with a bare draw just before it (None: not paired)
    ratio: float | None = None
    note: str = ""


def cpu_time(fn: Callable[[], object]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def best_of(fn: Callable[[], object], repeats: int) -> float:
    return min(cpu_time(fn) for _ in range(repeats))


def interleaved(
    fns: dict[str, Callable[[], object]], reference: Callable[[], object], rounds: int
) -> tuple[dict[str, float], dict[str, float], float]:
    """Time every function against ``reference`` in ``rounds`` rounds.

    In each round every function runs right after a fresh run of the reference, so the pair
    sees the same load. Returns the minimum CPU time of each function, the median over rounds of
    its paired ratio to the reference, and the minimum time of the reference.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    ratios: dict[str, list[float]] = {k: [] for k in fns}
    ref_times: list[float] = []
    for _ in range(rounds):
        for key, fn in fns.items():
            t_ref = cpu_time(reference)
            t = cpu_time(fn)
            ref_times.append(t_ref)
            times[key].append(t)
            ratios[key].append(t / t_ref)
    return (
        {k: min(v) for k, v in times.items()},
        {k: float(np.median(v)) for k, v in ratios.items()},
        min(ref_times),
    )


def unit_batch(n: int, d: int, seed: int = 0) -> np.ndarray:
    X = np.random.default_rng(seed).standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


# ---- the floor: just the standard normals ------------------------------------------------------


def bare_normals(n: int, d: int, dtype: type = np.float64) -> Callable[[], None]:
    """Draw n*d standard normals in the mechanisms' 4096-row blocks into a reused buffer."""
    buf = np.empty((BLOCK, d), dtype=dtype)

    def run() -> None:
        g = np.random.default_rng(1)
        for s in range(0, n, BLOCK):
            g.standard_normal(out=buf[: min(BLOCK, n - s)], dtype=dtype)

    return run


# ---- per-row loops in the style of the papers' reference code ---------------------------------


def loop_gaussian(X: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Lean: x/|x| + N(0, sigma^2 I) per row, renormalised."""
    out = np.empty_like(X)
    for i, x in enumerate(X):
        x = x.astype(np.float64)
        y = x / np.linalg.norm(x) + rng.normal(0.0, sigma, size=x.size)
        out[i] = y / np.linalg.norm(y)
    return out


def loop_gaussian_reference(X: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Reference style: multivariate_normal(0, sigma^2 I) per row."""
    out = np.empty_like(X)
    d = X.shape[1]
    cov = sigma**2 * np.eye(d)
    for i, x in enumerate(X):
        x = x.astype(np.float64)
        y = x / np.linalg.norm(x) + rng.multivariate_normal(np.zeros(d), cov)
        out[i] = y / np.sqrt(np.sum(y**2))
    return out


def loop_laplace(
    X: np.ndarray, epsilon: float, rng: np.random.Generator, scale: np.ndarray | None = None
) -> np.ndarray:
    """Lean: normal direction, gamma radius per row (times a diagonal Sigma^{1/2})."""
    out = np.empty_like(X)
    d = X.shape[1]
    for i, x in enumerate(X):
        x = x.astype(np.float64)
        u = rng.normal(size=d)
        u /= np.linalg.norm(u)
        z = rng.gamma(d, 1.0 / epsilon) * u
        if scale is not None:
            z *= scale
        y = x / np.linalg.norm(x) + z
        out[i] = y / np.linalg.norm(y)
    return out


def loop_laplace_reference(
    X: np.ndarray, epsilon: float, rng: np.random.Generator, sqrt_sigma: np.ndarray | None = None
) -> np.ndarray:
    """Reference style (CMP / Mahalanobis): multivariate_normal(0, I) direction per row, gamma
    radius, dense Sigma^{1/2} product."""
    out = np.empty_like(X)
    d = X.shape[1]
    eye = np.eye(d)
    for i, x in enumerate(X):
        x = x.astype(np.float64)
        n = rng.multivariate_normal(np.zeros(d), eye)
        u = n / np.sqrt(np.sum(n**2))
        if sqrt_sigma is not None:
            u = np.dot(sqrt_sigma, u)
        z = rng.gamma(d, 1.0 / epsilon) * u
        y = x / np.linalg.norm(x) + z
        out[i] = y / np.sqrt(np.sum(y**2))
    return out


def loop_purkayastha(X: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Per row: invert the angle CDF by root finding on numerically integrated densities."""
    out = np.empty_like(X)
    d = X.shape[1]
    mode = math.atan2(d - 2, epsilon)
    gmax = -epsilon * mode + (d - 2) * math.log(math.sin(mode))

    def dens(t: float) -> float:
        return math.exp(-epsilon * t + (d - 2) * math.log(math.sin(t)) - gmax) if t > 0 else 0.0

    for i, x in enumerate(X):
        x = x.astype(np.float64)
        x /= np.linalg.norm(x)
        total = integrate.quad(dens, 0.0, math.pi, points=[mode], limit=200)[0]
        u = rng.random()

        def F(t: float, u: float = u, total: float = total) -> float:
            pts = [mode] if t > mode else None
            return integrate.quad(dens, 0.0, t, points=pts, limit=200)[0] / total - u

        theta = optimize.brentq(F, 1e-12, math.pi - 1e-12, xtol=1e-12)
        v = rng.normal(size=d)
        v -= (v @ x) * x
        v /= np.linalg.norm(v)
        out[i] = math.cos(theta) * x + math.sin(theta) * v
    return out


# ---- peers ---------------------------------------------------------------------------------------


def import_diffprivlib_mechanisms() -> tuple[types.ModuleType | None, str]:
    try:
        return importlib.import_module("diffprivlib.mechanisms"), ""
    except ImportError as exc:
        spec = importlib.util.find_spec("diffprivlib")
        if spec is None or spec.submodule_search_locations is None:
            return None, f"not installed ({exc})"
        for name in [m for m in sys.modules if m.startswith("diffprivlib")]:
            del sys.modules[name]
        pkg = types.ModuleType("diffprivlib")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["diffprivlib"] = pkg
        try:
            mod = importlib.import_module("diffprivlib.mechanisms")
        except ImportError as exc2:  # pragma: no cover - environment dependent
            return None, f"cannot import ({exc2})"
        return mod, f"diffprivlib.mechanisms loaded alone: `import diffprivlib` fails ({exc})"


def peer_rows(X: np.ndarray, sigma: float, rows: int, repeats: int) -> tuple[list[Row], list[str]]:
    out: list[Row] = []
    notes: list[str] = []
    sub = X[:rows].astype(np.float64)
    mechs, why = import_diffprivlib_mechanisms()
    if why:
        notes.append(why)
    if mechs is None:
        out.append(Row("diffprivlib (not available)", math.nan, 0, "peer", note=why))
    else:
        ga = mechs.GaussianAnalytic(epsilon=EPS_GAUSS, delta=DELTA, sensitivity=2.0, random_state=0)
        lap = mechs.Laplace(epsilon=EPS_LAPLACE, sensitivity=2.0, random_state=0)
        for label, m in (
            ("diffprivlib GaussianAnalytic, per coordinate", ga),
            ("diffprivlib Laplace, per coordinate", lap),
        ):
            t = best_of(lambda m=m: [[m.randomise(float(v)) for v in x] for x in sub], repeats)
            out.append(Row(label, t / rows, rows, "peer"))
    try:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        meas = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T=float, nan=False)),
            dp.l2_distance(T=float),
            scale=sigma,
        )
        t = best_of(lambda: [meas(x.tolist()) for x in sub], repeats)
        out.append(Row("OpenDP make_gaussian (vector), per row", t / rows, rows, "peer"))
    except Exception as exc:  # pragma: no cover - environment dependent
        out.append(Row("OpenDP (not available)", math.nan, 0, "peer", note=str(exc)))
        notes.append(f"OpenDP unavailable: {exc}")
    return out, notes


# ---- a prototype of the proposed base pipeline (not shipped; see docs/benchmarks.md) ----------


def _row_norms(A: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", A, A))


def proposed_privatize(mech, X: np.ndarray, rng: int, block: int = 1024) -> np.ndarray:
    """What ``Mechanism.privatize`` does, with the changes proposed for base.py: row norms by
    einsum, normalisation/renormalisation in place, 1024-row blocks. Same validation call."""
    from privembed.core._validation import check_embeddings
    from privembed.mechanisms.base import GeneratorSource

    arr, _ = check_embeddings(X, allow_zero=mech.input_norm == "none")
    source = GeneratorSource(np.random.default_rng(rng))
    out = np.empty((arr.shape[0], mech.output_dim(arr.shape[1])), dtype=arr.dtype)
    for s in range(0, arr.shape[0], block):
        x = arr[s : s + block].astype(np.float64)
        if mech.input_norm == "normalize":
            x *= (1.0 / _row_norms(x))[:, None]
        elif mech.input_norm == "clip":
            x *= (1.0 / np.maximum(_row_norms(x), 1.0))[:, None]
        y = mech._perturb(x, source)
        if mech.renormalize and mech.name != "purkayastha":  # its outputs are unit already
            nr = _row_norms(y)
            y *= (1.0 / np.where(nr > 0, nr, 1.0))[:, None]
        out[s : s + block] = y
    return out


# ---- one dimension -------------------------------------------------------------------------------


def bench_dim(args: argparse.Namespace, d: int) -> tuple[list[Row], list[str]]:
    n = args.n
    X = unit_batch(n, d)
    rows: list[Row] = []
    r = args.repeats

    cov = np.random.default_rng(2).uniform(0.1, 2.0, d)
    mask = (np.random.default_rng(3).random(d) < 0.1).astype(float)
    full = np.random.default_rng(4).standard_normal((d, d)) / math.sqrt(d)
    full = full @ full.T + 0.5 * np.eye(d)
    mechs = {
        "gaussian": GaussianMechanism(epsilon=EPS_GAUSS, delta=DELTA),
        "empirical": EmpiricalGaussianMechanism(sigma=0.2),
        "laplace": LaplaceMechanism(epsilon=EPS_LAPLACE),
        "mahalanobis-diag": MahalanobisMechanism(epsilon=EPS_LAPLACE, covariance=cov),
        "mahalanobis-mask": MahalanobisMechanism(epsilon=EPS_LAPLACE, mask=mask),
        "mahalanobis-full": MahalanobisMechanism(epsilon=EPS_LAPLACE, covariance=full),
        "purkayastha": PurkayasthaMechanism(epsilon=EPS_PURK),
    }
    bare = bare_normals(n, d)
    fns: dict[str, Callable[[], object]] = {"bare32": bare_normals(n, d, np.float32)}
    for key, m in mechs.items():
        m.privatize(X[:10], rng=0)  # warm caches (e.g. the Purkayastha table)
        fns[key] = lambda m=m: m.privatize(X, rng=0)
    for key in ("gaussian", "laplace", "mahalanobis-diag", "purkayastha"):
        fns["proposed-" + key] = lambda m=mechs[key]: proposed_privatize(m, X, 0)
    t, ratio, t_bare = interleaved(fns, bare, r)
    rows.append(
        Row("numpy standard_normal, float64 (the floor)", t_bare / n, n, "floor", "bare", 1.0)
    )
    rows.append(
        Row(
            "numpy standard_normal, float32", t["bare32"] / n, n, "floor", "bare32", ratio["bare32"]
        )
    )
    for key in mechs:
        rows.append(Row(f"privembed {key}", t[key] / n, n, "privembed", key, ratio[key]))
    for key in ("gaussian", "laplace", "mahalanobis-diag", "purkayastha"):
        k = "proposed-" + key
        label = f"prototype: {key} with the proposed base pipeline"
        rows.append(Row(label, t[k] / n, n, "proposal", k, ratio[k]))

    sigma = mechs["gaussian"].sigma
    lr, rr, qr = args.loop_rows, args.ref_rows, args.quad_rows
    g = np.random.default_rng(5)
    sigma_n = cov * d / cov.sum()
    loops = [
        ("gaussian", "reference style", lambda: loop_gaussian_reference(X[:rr], sigma, g), rr),
        ("gaussian", "lean", lambda: loop_gaussian(X[:lr], sigma, g), lr),
        ("laplace", "reference style", lambda: loop_laplace_reference(X[:rr], EPS_LAPLACE, g), rr),
        ("laplace", "lean", lambda: loop_laplace(X[:lr], EPS_LAPLACE, g), lr),
        (
            "mahalanobis-diag",
            "reference style",
            lambda: loop_laplace_reference(X[:rr], EPS_LAPLACE, g, np.diag(np.sqrt(sigma_n))),
            rr,
        ),
        (
            "mahalanobis-diag",
            "lean",
            lambda: loop_laplace(X[:lr], EPS_LAPLACE, g, np.sqrt(sigma_n)),
            lr,
        ),
        (
            "purkayastha",
            "reference style",
            lambda: loop_purkayastha(X[:qr], EPS_PURK, g),
            qr,
        ),
    ]
    for key, style, fn, k in loops:
        # the reference-style loops are 100-10,000x slower: one timing is plenty
        t1 = best_of(fn, r if style == "lean" else 1)
        group = "loop" if style == "reference style" else "lean"
        rows.append(Row(f"per-row loop, {style}: {key}", t1 / k, k, group, key))
    peers, notes = peer_rows(X, sigma, args.peer_rows, r)
    rows += peers
    return rows, notes


def render(d: int, n: int, rows: list[Row]) -> str:
    bare = next(x for x in rows if x.key == "bare").seconds_per_vector
    loops = {x.key: x.seconds_per_vector for x in rows if x.group == "loop"}
    lean = {x.key: x.seconds_per_vector for x in rows if x.group == "lean"}
    lines = [
        f"#### d = {d}, n = {n:,}, float32 input",
        "",
        "| method | vectors/s | µs/vector | × bare normal draw (paired) "
        "| speed-up vs reference-style loop (vs lean loop) | rows timed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for x in rows:
        if math.isnan(x.seconds_per_vector):
            lines.append(f"| {x.label} | n/a | n/a | n/a | | {x.note} |")
            continue
        speed = ""
        if x.group == "privembed" and x.key in loops:
            speed = f"{loops[x.key] / x.seconds_per_vector:,.0f}×"
            if x.key in lean:
                speed += f" ({lean[x.key] / x.seconds_per_vector:,.1f}×)"
        rel = x.ratio if x.ratio is not None else x.seconds_per_vector / bare
        lines.append(
            f"| {x.label} | {1 / x.seconds_per_vector:,.0f} | {x.seconds_per_vector * 1e6:,.2f} "
            f"| {rel:.2f} | {speed} | {x.rows_timed:,} |"
        )
    return "\n".join(lines)


def check_targets(d: int, rows: list[Row]) -> list[str]:
    by = {x.key: x.seconds_per_vector for x in rows if x.group in ("privembed", "proposal")}
    rel = {x.key: x.ratio for x in rows if x.group in ("privembed", "proposal")}
    loops = {x.key: x.seconds_per_vector for x in rows if x.group == "loop"}
    out = []
    for key in ("gaussian", "laplace", "mahalanobis-diag"):
        ratio = rel[key]
        prop = rel["proposed-" + key]
        out.append(
            f"d={d} {key}: {ratio:.2f}× bare draw (target <= 1.5): {_ok(ratio <= 1.5)}"
            f" -- with the proposed base pipeline {prop:.2f}×: {_ok(prop <= 1.5)}"
        )
    ratio = rel["purkayastha"] / rel["laplace"]  # both paired with the bare draw
    out.append(f"d={d} purkayastha: {ratio:.2f}× laplace (target <= 3): " + _ok(ratio <= 3))
    for key, loop in loops.items():
        sp = loop / by[key]
        out.append(
            f"d={d} {key}: {sp:,.0f}× faster than the reference-style per-row loop (>= 100): "
            + _ok(sp >= 100)
        )
    return out


def _ok(flag: bool) -> str:
    return "PASS" if flag else "MISS"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="vectors per batch")
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 768])
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    ap.add_argument("--loop-rows", type=int, default=2000, help="rows timed for lean loops")
    ap.add_argument("--ref-rows", type=int, default=3, help="rows timed for reference-style loops")
    ap.add_argument("--quad-rows", type=int, default=10, help="rows timed for the quad loop")
    ap.add_argument("--peer-rows", type=int, default=5, help="rows timed for the peers")
    args = ap.parse_args()

    print("## Vector mechanisms (issue 3)\n")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; times are CPU time of this process, best "
        f"of {args.repeats}; command: `python {' '.join(sys.argv)}`\n"
    )
    targets, notes = [], []
    for d in args.dims:
        rows, nts = bench_dim(args, d)
        notes += nts
        print(render(d, args.n, rows) + "\n")
        targets += check_targets(d, rows)
    print("Targets:\n")
    for line in targets:
        print(f"- {line}")
    for note in dict.fromkeys(notes):
        print(f"\nNote: {note}")


if __name__ == "__main__":
    main()
