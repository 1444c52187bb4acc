"""Sweeps: mechanisms x parameters x repeated runs -> one tidy table, resumable.

:func:`grid` builds the configurations; :func:`run_sweep` protects the embeddings once per
(configuration, run) with an independent random stream, scores every release with a
:class:`~privembed.evaluation.UtilityEvaluator` and any privacy metrics
(:mod:`privembed.evaluation.privacy`), and returns a :class:`SweepResult`: per-run records,
a tidy summary (one row per configuration and metric with mean, standard deviation and the
number of runs -- [T26] reports 5 runs), the unprotected baseline and the formal guarantee of
every configuration.

Resuming. With ``results=path`` every finished cell is appended to a JSON-lines file (flushed
and fsync'ed) before the next one starts. Run the same sweep again with the same file and the
finished cells are read back instead of recomputed; a line cut short by an interruption is
dropped. The file's first line records the seed, a SHA-256 of the data and the metric setup;
a file written for anything else is refused rather than mixed in.

Random streams. The noise of cell (configuration c, run r) comes from
``spawn(root_c, runs)[r]`` where ``root_c`` is a 128-bit integer derived from the sweep seed and
c's canonical parameters (:func:`cell_streams`): runs are independent spawned streams
(:func:`privembed.core.rng.spawn`), and a cell's stream depends only on (seed, configuration, run),
not on the order of the grid or on which cells were already done -- so an interrupted and
resumed sweep gives exactly the numbers of an uninterrupted one. Each cell's stream is split
into a noise stream and an attack stream.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int
from ..core.accounting import Guarantee, NoGuarantee, guarantee_from_dict
from ..core.rng import spawn
from ..mechanisms import MECHANISMS, Mechanism, build_mechanism
from .privacy import (
    NOT_CHECKED,
    CellRelease,
    Column,
    StrengthCheck,
    describe_columns,
    metric_name,
    metric_signature,
    run_on_plain,
)
from .utility import UtilityEvaluator

__all__ = [
    "FORMAT_VERSION",
    "SweepConfig",
    "SweepResult",
    "cell_streams",
    "data_fingerprint",
    "grid",
    "run_sweep",
]

FORMAT_VERSION = 1
#: parameters that put configurations of one mechanism on a curve (in this order of preference)
X_PARAMS = ("epsilon", "sigma")


#: real-valued mechanism parameters: stored as floats, so 10 and 10.0 are one configuration
FLOAT_PARAMS = frozenset(
    {"epsilon", "delta", "sigma", "smoothing", "mask_delta", "report_delta", "sensitivity"}
)


def _jsonable(name: str, v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if name in FLOAT_PARAMS and isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    return v


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class SweepConfig:
    """One mechanism configuration: a registry name and its keyword parameters (JSON-safe).

    ``params`` may hold ``profile="path"`` for the Mahalanobis mechanism (a saved concept
    profile or mask file, :meth:`~privembed.mechanisms.MahalanobisMechanism.from_profile`).

    Examples
    --------
    >>> c = SweepConfig("laplace", {"epsilon": 10.0})
    >>> c.label, c.build()
    ('laplace(epsilon=10)', LaplaceMechanism(epsilon=10.0))
    """

    mechanism: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
            raise ValueError(f"mechanism must be one of {opts}, got mechanism={self.mechanism!r}.")
        clean = {
            str(k): _jsonable(str(k), v) for k, v in sorted(self.params.items()) if v is not None
        }
        try:
            json.dumps(clean, allow_nan=False)
        except (TypeError, ValueError):
            raise TypeError(
                f"SweepConfig params must be JSON-safe numbers/strings, got {self.params!r}."
            ) from None
        if isinstance(clean.get("profile"), str) and "profile_sha256" not in clean:
            digest = _file_digest(clean["profile"])
            if digest is not None:
                clean["profile_sha256"] = digest
                clean = dict(sorted(clean.items()))
        object.__setattr__(self, "params", clean)

    @property
    def canonical(self) -> str:
        """Canonical JSON of (mechanism, params): what identifies the configuration.

        A profile is identified by its content (``profile_sha256``, added when the file is
        read at construction) rather than its path: the same mask at another path gives the
        same configuration (and noise streams), a profile re-learned at the same path a new one.
        """
        params = dict(self.params)
        if "profile_sha256" in params:
            params.pop("profile", None)
        return json.dumps(
            {"mechanism": self.mechanism, "params": params},
            sort_keys=True,
            separators=(",", ":"),
        )

    @property
    def key(self) -> str:
        """Short stable id: the first 16 hex digits of the SHA-256 of :attr:`canonical`."""
        return hashlib.sha256(self.canonical.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        inner = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.mechanism}({inner})"

    @property
    def x_param(self) -> str | None:
        """The parameter that places this configuration on its mechanism's curve."""
        for p in X_PARAMS:
            if p in self.params:
                return p
        return None

    def build(self) -> Mechanism:
        """The mechanism object (:func:`~privembed.mechanisms.build_mechanism`; a ``profile``
        is the Mahalanobis mechanism's ``mask``, read from the file)."""
        params = dict(self.params)
        profile = params.pop("profile", None)
        expected = params.pop("profile_sha256", None)
        if profile is not None and expected is not None:
            found = _file_digest(profile)
            if found != expected:
                raise DataError(
                    f"profile {profile} changed since this configuration was made "
                    f"(sha256 {expected}..., now {found or 'unreadable'})."
                )
        if profile is not None:
            if self.mechanism != "mahalanobis":
                raise ValueError(
                    f"profile is a parameter of the mahalanobis mechanism only, got it for "
                    f"{self.mechanism!r}."
                )
            params["mask"] = profile
        return build_mechanism(self.mechanism, **params)

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "params": dict(self.params)}


def _file_digest(path: str) -> str | None:
    """First 16 hex digits of a file's SHA-256 (None if it cannot be read)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()[:16]


def grid(
    mechanisms: Sequence[str],
    *,
    epsilon: Sequence[float] = (1.0, 5.0, 10.0, 20.0, 50.0),
    delta: float = 1e-5,
    sigma: Sequence[float] | None = None,
    params: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
) -> list[SweepConfig]:
    """Cartesian grid of configurations.

    Parameters
    ----------
    mechanisms : sequence of str
        Registry names (:data:`privembed.mechanisms.MECHANISMS`).
    epsilon : sequence of float
        For every mechanism that takes epsilon.
    delta : float
        For the mechanisms that take delta (``gaussian``, ``projection``).
    sigma : sequence of float, optional
        Noise scales of ``empirical`` ([K26]'s empirical noise; default 0.05, 0.1, 0.2, 0.5).
    params : dict, optional
        Extra lists per mechanism, crossed with the above, e.g.
        ``{"projection": {"k": [64, 128]}, "gaussian": {"calibration": ["analytic", "classic"]}}``.
        ``projection`` needs ``k``.

    Examples
    --------
    >>> [c.label for c in grid(["laplace", "gaussian"], epsilon=[1, 10])]
    ['laplace(epsilon=1)', 'laplace(epsilon=10)', 'gaussian(delta=1e-05, epsilon=1)', 'gaussian(delta=1e-05, epsilon=10)']
    """
    if isinstance(mechanisms, str) or not mechanisms:
        raise ValueError(f"mechanisms must be a non-empty list of names, got {mechanisms!r}.")
    extra = {k: dict(v) for k, v in (params or {}).items()}
    unknown = set(extra) - set(mechanisms)
    if unknown:
        raise ValueError(f"params given for mechanisms not in the sweep: {sorted(unknown)}.")
    eps = [float(e) for e in epsilon]
    if any(not (e > 0 and math.isfinite(e)) for e in eps):
        raise ValueError(f"epsilon values must be finite and > 0, got epsilon={list(epsilon)!r}.")
    out: list[SweepConfig] = []
    for name in mechanisms:
        if name not in MECHANISMS:
            opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
            raise ValueError(f"mechanism must be one of {opts}, got mechanism={name!r}.")
        base: dict[str, list[Any]] = {}
        cls = MECHANISMS[name]
        if cls.privacy_parameter == "sigma":
            base["sigma"] = [
                float(s) for s in (sigma if sigma is not None else (0.05, 0.1, 0.2, 0.5))
            ]
        else:
            base["epsilon"] = eps
        if cls.needs("delta"):
            base["delta"] = [float(delta)]
        for k, v in extra.get(name, {}).items():
            base[k] = [v] if isinstance(v, str | int | float) else list(v)
        if name == "projection" and "k" not in base:
            raise ValueError(
                "the projection mechanism needs its output dimension: "
                "params={'projection': {'k': [...]}}."
            )
        keys = list(base)
        for combo in itertools.product(*(base[k] for k in keys)):
            out.append(SweepConfig(name, dict(zip(keys, combo, strict=True))))
    keys_seen = [c.key for c in out]
    if len(set(keys_seen)) != len(keys_seen):
        raise ValueError("the grid has duplicate configurations.")
    return out


def data_fingerprint(X: Any) -> str:
    """SHA-256 of the embeddings' shape, dtype and bytes (what a results file was made from)."""
    A = np.ascontiguousarray(np.asarray(X))
    h = hashlib.sha256(f"{A.shape}|{A.dtype.str}|".encode())
    h.update(A.tobytes())
    return h.hexdigest()


def cell_streams(seed: int, config: SweepConfig, run: int, runs: int) -> tuple[Any, Any]:
    """(noise generator, attack generator) of one sweep cell.

    ``root = int(sha256(f"{seed}:{canonical}"))`` (128 bits), the run's stream is
    ``spawn(root, runs)[run]``, and that is split by :func:`privembed.core.rng.spawn` into two.
    """
    g = spawn(_stream_root(seed, config.canonical), runs)[run]
    noise, attack = spawn(g, 2)
    return noise, attack


def _stream_root(seed: int, label: str) -> int:
    """128-bit root ``int(sha256(f"{seed}:{label}"))`` of the streams named ``label``."""
    digest = hashlib.sha256(f"{int(seed)}:{label}".encode()).digest()
    return int.from_bytes(digest[:16], "big")


def baseline_stream(seed: int) -> Any:
    """The attack generator of the unprotected reference row (independent of every cell)."""
    return spawn(_stream_root(seed, "unprotected-baseline"), 1)[0]


# ---------------------------------------------------------------------------------------------
# results file
# ---------------------------------------------------------------------------------------------


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Parsed records and the byte length of the valid prefix (a torn last line is dropped)."""
    raw = path.read_bytes()
    records: list[dict[str, Any]] = []
    good = 0
    start = 0
    while start < len(raw):
        nl = raw.find(b"\n", start)
        if nl == -1:  # a final fragment without its newline: an interrupted write
            break
        line = raw[start:nl]
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if not raw[nl + 1 :].strip():
                    break  # a torn last line
                raise DataError(
                    f"{path}: line {len(records) + 1} is not valid JSON: {exc}"
                ) from None
        start = nl + 1
        good = start
    return records, good


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class _ResultsFile:
    def __init__(self, path: Path, header: dict[str, Any], restart: bool) -> None:
        self.path = path
        self.done: dict[tuple[str, int], dict[str, Any]] = {}
        self.baseline: dict[str, Any] | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        if restart and path.exists():
            path.unlink()
        if path.exists() and path.stat().st_size > 0:
            records, good = _read_lines(path)
            if not records or records[0].get("type") != "header":
                raise DataError(f"{path} is not a privembed sweep results file (no header line).")
            old = records[0]
            diff = [k for k in header if k != "type" and old.get(k) != header[k]]
            if diff:
                raise DataError(
                    f"{path} was written by a different sweep (differs in: {', '.join(diff)}); "
                    "use another results file or restart=True (--restart) to overwrite it."
                )
            for r in records[1:]:
                if r.get("type") == "cell":
                    self.done[(r["key"], int(r["run"]))] = r
                elif r.get("type") == "baseline":
                    self.baseline = r
            if good < path.stat().st_size:
                with path.open("r+b") as fh:
                    fh.truncate(good)
        else:
            self.append(header)

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(_dump(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


# ---------------------------------------------------------------------------------------------
# the sweep
# ---------------------------------------------------------------------------------------------


#: a privacy metric: a release in, named columns out
_Metric = Callable[[CellRelease], Mapping[str, float]]


def _clean(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, v in metrics.items():
        f = float(v)
        out[str(k)] = f if math.isfinite(f) else None
    return out


def run_sweep(
    X: Any,
    configs: Iterable[SweepConfig],
    *,
    runs: int = 5,
    seed: int = 0,
    utility: UtilityEvaluator | None = None,
    privacy: Sequence[Callable[[CellRelease], Mapping[str, float]]] = (),
    results: str | Path | None = None,
    restart: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    description: Mapping[str, Any] | None = None,
) -> SweepResult:
    """Protect ``X`` with every configuration ``runs`` times and score every release.

    Parameters
    ----------
    X : array_like, shape (n, d)
        The original embeddings.
    configs : iterable of SweepConfig
        E.g. from :func:`grid`.
    runs : int, default 5
        Independent releases per configuration.
    seed : int, default 0
        Root of every cell's streams (see :func:`cell_streams`); ``None`` is not accepted: a
        resumable sweep must be reproducible.
    utility : UtilityEvaluator, optional
        Default: ``UtilityEvaluator(X)``.
    privacy : sequence of callables
        Privacy metrics (:mod:`privembed.evaluation.privacy`), called with a
        :class:`~privembed.evaluation.privacy.CellRelease`; any returned columns are kept.
    results : path, optional
        JSON-lines file of finished cells, for resuming (see the module notes).
    restart : bool
        Delete an existing results file first.
    on_progress : callable(done, total), optional
        Called after every cell (also for the cells read back from ``results``).
    description : dict, optional
        Data description stored with the result (source file, model, ...).

    Returns
    -------
    SweepResult

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((100, 8))
    >>> res = run_sweep(X, grid(["laplace"], epsilon=[5, 50]), runs=2, seed=1)
    >>> [(r["label"], r["n_runs"]) for r in res.summary() if r["metric"] == "top1_originals"]
    [('laplace(epsilon=5)', 2), ('laplace(epsilon=50)', 2)]
    """
    A, _ = check_embeddings(X, name="X")
    A = np.asarray(A)
    runs = check_int("runs", runs, ge=1)
    seed = check_int("seed", seed, ge=0)
    cfgs = _check_configs(configs)
    ev = _check_evaluator(utility, A)
    metrics = list(privacy)
    names = _metric_names(metrics)
    header = _header(A, seed, runs, ev, metrics)
    store = _ResultsFile(Path(results), header, restart) if results is not None else None
    columns = _columns(ev, metrics)
    t_start = time.perf_counter()
    baseline = _baseline(A, seed, ev, metrics, store)
    cells = _Cells(A, seed, runs, ev, metrics, columns, store)
    records = cells.run_all(cfgs, on_progress)
    settings = {
        "seed": seed,
        "runs": runs,
        "n": int(A.shape[0]),
        "d": int(A.shape[1]),
        "data_sha256": header["data_sha256"],
        "utility": ev.settings(),
        "privacy": names,
        "wall_seconds": time.perf_counter() - t_start,
        "computed_seconds": cells.computed_seconds,
        "results_file": None if results is None else str(results),
    }
    return SweepResult(
        configs=cfgs,
        records=records,
        baseline=dict(baseline.get("metrics", {})),
        columns=columns,
        settings=settings,
        description=dict(description or {}),
        checks={
            c.attack: c for c in (StrengthCheck.from_dict(d) for d in baseline.get("checks", []))
        },
    )


def _check_configs(configs: Iterable[SweepConfig]) -> list[SweepConfig]:
    """The configurations as a list: not empty, no configuration twice."""
    cfgs = list(configs)
    if not cfgs:
        raise ValueError("configs must not be empty.")
    keys = [c.key for c in cfgs]
    if len(set(keys)) != len(keys):
        raise ValueError("configs has duplicate configurations.")
    return cfgs


def _check_evaluator(utility: UtilityEvaluator | None, A: NDArray[Any]) -> UtilityEvaluator:
    """``utility``, or ``UtilityEvaluator(A)`` by default; one built for other data is refused."""
    ev = utility if utility is not None else UtilityEvaluator(A)
    if ev.n != A.shape[0] or ev.d != A.shape[1]:
        raise DataError(f"the utility evaluator was built for {ev.n} x {ev.d}, X is {A.shape}.")
    return ev


def _metric_names(metrics: Sequence[_Metric]) -> list[str]:
    """The privacy metrics' names, which must be distinct."""
    names = [metric_name(m) for m in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"privacy metrics need distinct names, got {names}.")
    return names


def _header(
    A: NDArray[Any],
    seed: int,
    runs: int,
    ev: UtilityEvaluator,
    metrics: Sequence[_Metric],
) -> dict[str, Any]:
    """The results file's first line: what a resumed sweep must have in common with this one."""
    return {
        "type": "header",
        "format": FORMAT_VERSION,
        "seed": seed,
        "runs": runs,
        "data_sha256": data_fingerprint(A),
        "shape": list(A.shape),
        "utility": ev.settings(),
        "privacy": [_dump(metric_signature(m)) for m in metrics],
    }


def _columns(ev: UtilityEvaluator, metrics: Sequence[_Metric]) -> dict[str, Column]:
    """What every utility column and every column the privacy metrics declare means."""
    columns: dict[str, Column] = {
        k: Column(v, kind="utility", higher_is_better=True) for k, v in ev.columns.items()
    }
    for m in metrics:
        columns.update(describe_columns(m))
    return columns


def _baseline(
    A: NDArray[Any],
    seed: int,
    ev: UtilityEvaluator,
    metrics: Sequence[_Metric],
    store: _ResultsFile | None,
) -> dict[str, Any]:
    """The unprotected reference row (utility baseline, every attack on the plain embeddings):
    read back from the results file, else computed and appended to it."""
    if store is not None and store.baseline is not None:
        return store.baseline
    base_values: dict[str, Any] = dict(ev.baseline())
    checks: list[StrengthCheck] = []
    if metrics:  # every attack once on the plain embeddings (its reference and strength check)
        checks, columns = run_on_plain(A, metrics, baseline_stream(seed))
        for got in columns:
            for col, val in got.items():
                base_values.setdefault(col, val)
    baseline = {
        "type": "baseline",
        "metrics": _clean(base_values),
        "checks": [c.to_dict() for c in checks],
    }
    if store is not None:
        store.append(baseline)
    return baseline


class _Cells:
    """The (configuration, run) cells of one sweep: read back from the results file when
    finished there, else computed and appended to it."""

    def __init__(
        self,
        A: NDArray[Any],
        seed: int,
        runs: int,
        ev: UtilityEvaluator,
        metrics: Sequence[_Metric],
        columns: dict[str, Column],
        store: _ResultsFile | None,
    ) -> None:
        self.A, self.seed, self.runs = A, seed, runs
        self.ev, self.metrics, self.columns, self.store = ev, metrics, columns, store
        #: time spent computing cells (not reading them back)
        self.computed_seconds = 0.0

    def run_all(
        self, cfgs: Sequence[SweepConfig], on_progress: Callable[[int, int], None] | None
    ) -> list[dict[str, Any]]:
        """Every cell's record, configuration by configuration and run by run."""
        store = self.store
        records: list[dict[str, Any]] = []
        total = len(cfgs) * self.runs
        done = 0
        for cfg in cfgs:
            mech: Mechanism | None = None
            for run in range(self.runs):
                prev = store.done.get((cfg.key, run)) if store is not None else None
                if prev is not None:
                    records.append(prev)
                else:
                    if mech is None:
                        mech = cfg.build()
                    rec = self.compute(cfg, mech, run)
                    self.computed_seconds += rec["seconds"]
                    if store is not None:
                        store.append(rec)
                    records.append(rec)
                done += 1
                if on_progress is not None:
                    on_progress(done, total)
        return records

    def compute(self, cfg: SweepConfig, mech: Mechanism, run: int) -> dict[str, Any]:
        """One release of ``cfg`` scored by the utility evaluator and every privacy metric; a
        column a metric returns for the first time is added to the sweep's columns."""
        A = self.A
        noise, attack = cell_streams(self.seed, cfg, run, self.runs)
        t0 = time.perf_counter()
        Y = mech.privatize(A, rng=noise)
        t_release = time.perf_counter() - t0
        values: dict[str, Any] = dict(self.ev.evaluate(Y, mech))
        rel = CellRelease(mech, A, Y, attack, {"label": cfg.label, "run": run})
        for m in self.metrics:
            got = m(rel)
            clash = set(got) & set(values)
            if clash:
                raise ValueError(
                    f"privacy metric {metric_name(m)!r} returned columns that already "
                    f"exist: {sorted(clash)}."
                )
            values.update(got)
            for col in got:
                self.columns.setdefault(col, Column(f"{metric_name(m)}: {col}"))
        secs = time.perf_counter() - t0
        g = mech.guarantee
        return {
            "type": "cell",
            "key": cfg.key,
            "config": cfg.to_dict(),
            "label": cfg.label,
            "run": run,
            "guarantee": g.to_dict(),
            "metrics": _clean(values),
            "seconds": secs,
            "release_seconds": t_release,
            "output_dim": int(Y.shape[1]),
        }


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


def _mean_std(vals: list[float]) -> tuple[float, float]:
    a = np.asarray(vals, dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else float("nan")


@dataclass
class SweepResult:
    """What a sweep measured: per-run records, the baseline, column meanings and settings.

    Attributes
    ----------
    configs : list of SweepConfig
    records : list of dict
        One per (configuration, run): ``key``, ``label``, ``run``, ``guarantee`` (a
        :meth:`~privembed.core.accounting.Guarantee.to_dict`), ``metrics`` (column -> value or None),
        ``seconds``.
    baseline : dict
        Utility metrics of the unprotected embeddings.
    columns : dict of str -> Column
    settings : dict
    description : dict
        Data description (source, model, ...).
    checks : dict of str -> StrengthCheck
        Per attack (metric name): did it beat its blind baseline on the unprotected embeddings?
        (:class:`~privembed.evaluation.privacy.StrengthCheck`.)
    """

    configs: list[SweepConfig]
    records: list[dict[str, Any]]
    baseline: dict[str, float | None]
    columns: dict[str, Column]
    settings: dict[str, Any]
    description: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, StrengthCheck] = field(default_factory=dict)

    # ---- attack strength --------------------------------------------------------------------
    def attack_check(self, column: str) -> StrengthCheck | None:
        """The strength check of the attack that produced ``column`` (None if none)."""
        for c in self.checks.values():
            if column in c.columns:
                return c
        return None

    def attack_status(self, column: str) -> str:
        """``"ok"``, ``"attack too weak: no evidence about protection"``, ``"strength not
        checked ..."`` for an attack's column; ``""`` for a utility column."""
        kind = self.column(column).kind
        if kind == "utility":
            return ""
        check = self.attack_check(column)
        if check is not None:
            return check.status
        return NOT_CHECKED if kind == "privacy" else ""

    def evidence_columns(self) -> list[str]:
        """Privacy columns that count as evidence: those of attacks not found too weak."""
        return [
            c
            for c in self.metric_names("privacy")
            if (chk := self.attack_check(c)) is None or chk.passed
        ]

    def weak_columns(self) -> list[str]:
        """Columns (privacy and reference) of attacks too weak to be evidence."""
        return [c for c in self.metric_names() if (chk := self.attack_check(c)) and not chk.passed]

    # ---- derived views ----------------------------------------------------------------------
    def guarantee(self, config: SweepConfig) -> Guarantee:
        """The guarantee record of a configuration (from its first run)."""
        for r in self.records:
            if r["key"] == config.key:
                return guarantee_from_dict(r["guarantee"])
        return NoGuarantee("not run")

    def metric_names(self, kind: str | None = None) -> list[str]:
        """Columns present in the records (optionally of one kind), in column order."""
        present: dict[str, None] = {}
        for r in self.records:
            for k in r["metrics"]:
                present.setdefault(k, None)
        order = [c for c in self.columns if c in present] + [
            c for c in present if c not in self.columns
        ]
        if kind is None:
            return order
        return [c for c in order if self.column(c).kind == kind]

    def column(self, name: str) -> Column:
        return self.columns.get(name, Column(name))

    def families(self) -> dict[str, list[SweepConfig]]:
        """Curves: configurations of one mechanism that differ only in their x parameter.

        The family label is the mechanism plus the parameters that vary among that mechanism's
        configurations (other than epsilon/sigma), e.g. ``projection(k=64)``.
        """
        by_mech: dict[str, list[SweepConfig]] = {}
        for c in self.configs:
            by_mech.setdefault(c.mechanism, []).append(c)
        out: dict[str, list[SweepConfig]] = {}
        for mech, cs in by_mech.items():
            varying = sorted(
                {
                    k
                    for k in set().union(*(c.params for c in cs))
                    if k not in X_PARAMS and len({_dump(c.params.get(k)) for c in cs}) > 1
                }
            )
            for c in cs:
                extra = ", ".join(f"{k}={_fmt(c.params.get(k))}" for k in varying)
                label = f"{mech}({extra})" if extra else mech
                out.setdefault(label, []).append(c)
        for label, cs in out.items():
            xp = cs[0].x_param
            out[label] = sorted(cs, key=lambda c: float(c.params.get(xp, 0.0)) if xp else 0.0)
        return out

    def family_of(self, config: SweepConfig) -> str:
        for label, cs in self.families().items():
            if config in cs:
                return label
        return config.mechanism

    def stats(self, config: SweepConfig, metric: str) -> tuple[float, float, int]:
        """(mean, sample std, number of runs with a value) of ``metric`` for ``config``."""
        vals = [
            float(v)
            for r in self.records
            if r["key"] == config.key and (v := r["metrics"].get(metric)) is not None
        ]
        m, s = _mean_std(vals)
        return m, s, len(vals)

    def summary(self) -> list[dict[str, Any]]:
        """The tidy table: one row per (configuration, metric) with mean, std and n_runs."""
        rows = []
        fams = {c.key: f for f, cs in self.families().items() for c in cs}
        params = sorted({k for c in self.configs for k in c.params})
        for c in self.configs:
            g = self.guarantee(c)
            secs = [r["seconds"] for r in self.records if r["key"] == c.key]
            for metric in self.metric_names():
                mean, std, n = self.stats(c, metric)
                col = self.column(metric)
                rows.append(
                    {
                        "config_id": c.key,
                        "label": c.label,
                        "family": fams.get(c.key, c.mechanism),
                        "mechanism": c.mechanism,
                        **{p: c.params.get(p) for p in params},
                        "guarantee": g.short(),
                        "guarantee_detail": g.describe(),
                        "guarantee_kind": g.kind,
                        "metric": metric,
                        "kind": col.kind,
                        "attack_status": self.attack_status(metric),
                        "mean": mean,
                        "std": std,
                        "n_runs": n,
                        "baseline": self.baseline.get(metric),
                        "seconds_per_run": float(np.mean(secs)) if secs else float("nan"),
                    }
                )
        return rows

    def runs_table(self) -> list[dict[str, Any]]:
        """One row per (configuration, run), metrics as columns."""
        params = sorted({k for c in self.configs for k in c.params})
        by_key = {c.key: c for c in self.configs}
        metrics = self.metric_names()
        rows = []
        for r in self.records:
            c = by_key.get(r["key"])
            g = guarantee_from_dict(r["guarantee"])
            rows.append(
                {
                    "config_id": r["key"],
                    "label": r["label"],
                    "mechanism": c.mechanism if c else r["config"]["mechanism"],
                    **{p: (c.params.get(p) if c else None) for p in params},
                    "run": r["run"],
                    "guarantee": g.short(),
                    **{m: r["metrics"].get(m) for m in metrics},
                    "seconds": r["seconds"],
                }
            )
        return rows

    # ---- persistence ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Everything, JSON-safe (NaN -> null)."""

        def fix(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: fix(x) for k, x in v.items()}
            if isinstance(v, list):
                return [fix(x) for x in v]
            return v

        return fix(
            {
                "format": FORMAT_VERSION,
                "settings": self.settings,
                "description": self.description,
                "columns": {k: c.to_dict() for k, c in self.columns.items()},
                "baseline": self.baseline,
                "attack_checks": [c.to_dict() for c in self.checks.values()],
                "configs": [
                    {
                        "config_id": c.key,
                        "label": c.label,
                        **c.to_dict(),
                        "guarantee": self.guarantee(c).to_dict(),
                        "guarantee_text": self.guarantee(c).describe(),
                    }
                    for c in self.configs
                ],
                "summary": self.summary(),
                "runs": self.runs_table(),
            }
        )

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``results.csv`` (tidy summary), ``results.parquet`` (if pyarrow is installed),
        ``results.json`` (everything) and ``runs.csv`` (one row per run) into ``out_dir``."""
        from ..data.io import atomic_output

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        summary = self.summary()
        for name, rows in (("results.csv", summary), ("runs.csv", self.runs_table())):
            with atomic_output(out / name) as tmp:
                _write_csv(tmp, rows)
            paths[name] = out / name
        with atomic_output(out / "results.json") as tmp:
            tmp.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False), encoding="utf-8")
        paths["results.json"] = out / "results.json"
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - pyarrow is in the io extra
            return paths
        table = pa.Table.from_pylist([{k: _arrow_safe(v) for k, v in r.items()} for r in summary])
        with atomic_output(out / "results.parquet") as tmp:
            pq.write_table(table, tmp)
        paths["results.parquet"] = out / "results.parquet"
        return paths

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepResult:
        """Rebuild from :meth:`to_json` output (e.g. a saved ``results.json``)."""
        configs = [SweepConfig(c["mechanism"], c["params"]) for c in data["configs"]]
        by_label = {c.label: c for c in configs}
        guarantees = {c["config_id"]: c["guarantee"] for c in data["configs"]}
        metric_cols = [k for k in data["columns"]]
        records = []
        for r in data["runs"]:
            c = by_label[r["label"]]
            present = {k: r.get(k) for k in metric_cols if k in r}
            records.append(
                {
                    "type": "cell",
                    "key": c.key,
                    "config": c.to_dict(),
                    "label": c.label,
                    "run": r["run"],
                    "guarantee": guarantees[c.key],
                    "metrics": present,
                    "seconds": r.get("seconds") or 0.0,
                }
            )
        columns = {
            k: Column(v["description"], v["kind"], v["higher_is_better"])
            for k, v in data["columns"].items()
        }
        return cls(
            configs=configs,
            records=records,
            baseline=dict(data.get("baseline", {})),
            columns=columns,
            settings=dict(data.get("settings", {})),
            description=dict(data.get("description", {})),
            checks={
                c.attack: c
                for c in (StrengthCheck.from_dict(d) for d in data.get("attack_checks", []))
            },
        )


def _arrow_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    fields: dict[str, None] = {}
    for r in rows:
        for k in r:
            fields.setdefault(k, None)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def describe_embeddings(X: Any, *, sample: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Shape, norms and cosine geometry of an embedding matrix (for the report's data section)."""
    A, _ = check_embeddings(X, name="X")
    A64 = np.asarray(A, dtype=np.float64)
    norms = np.linalg.norm(A64, axis=1)
    n = A64.shape[0]
    idx = (
        np.arange(n) if n <= sample else np.sort(spawn(seed, 1)[0].choice(n, sample, replace=False))
    )
    U = A64[idx] / norms[idx, None]
    S = U @ U.T
    np.fill_diagonal(S, np.nan)
    nn: NDArray[np.float64] = np.nanmax(S, axis=1) if U.shape[0] > 1 else np.array([np.nan])
    return {
        "n": int(n),
        "d": int(A64.shape[1]),
        "dtype": str(np.asarray(A).dtype),
        "norm_min": float(norms.min()),
        "norm_mean": float(norms.mean()),
        "norm_max": float(norms.max()),
        "mean_pairwise_cosine": float(np.nanmean(S)) if U.shape[0] > 1 else float("nan"),
        "mean_nearest_neighbour_cosine": float(np.nanmean(nn)),
        "geometry_sample": int(U.shape[0]),
    }
