"""``privembed audit``: audit a mechanism's claim -- an epsilon lower bound from sampling and a
white-box check of its noise law (:mod:`privembed.audit`).

The verdict is consistent, violation or inconclusive. Exit status: 0, unless
``--fail-on-violation`` or ``--fail-unless-consistent`` is given and the verdict is a violation
(3), or ``--fail-unless-consistent`` is given and it is inconclusive (4); 2 for usage and data
errors. With ``--keyed`` the noise is drawn through the keyed release path, by default once
per keyed generator (Philox, then AES), and the worst verdict counts.

Examples::

    privembed audit -m laplace --epsilon 1 --dim 2 --samples 1000000
    privembed audit -m gaussian --epsilon 4 --delta 1e-5 --dim 384 --json
    privembed audit --from-file protected.parquet          # the configuration in its metadata
    privembed audit -m gaussian --epsilon 2 --delta 1e-5 --keyed --fail-unless-consistent
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from .common import (
    MechanismName,
    MechanismOptions,
    OptionGroup,
    console,
    err_console,
    print_json,
    user_errors,
    with_option_groups,
)
from .options import OptJson, OptSeed, mechanism_flag

__all__ = ["EXIT_INCONCLUSIVE", "EXIT_VIOLATION", "audit", "register"]

#: exit status of a violation under --fail-on-violation or --fail-unless-consistent
EXIT_VIOLATION = 3
#: exit status of an inconclusive audit under --fail-unless-consistent
EXIT_INCONCLUSIVE = 4
#: verdicts from best to worst (several audits: the worst counts)
_ORDER = ("consistent", "inconclusive", "violation")
_STYLE = {"consistent": "bold green", "inconclusive": "bold yellow", "violation": "bold red"}

# ---- options grouped with the helper that reads them -----------------------------------------
# what is audited (_mechanism_under_audit)
OptMechanism = Annotated[MechanismName | None, mechanism_flag(help="The mechanism to audit.")]
OptFromFile = Annotated[
    Path | None,
    typer.Option(
        "--from-file", help="Audit the mechanism recorded in a protected file's metadata."
    ),
]
OptDim = Annotated[
    int | None, typer.Option("--dim", help="Input dimension (default 16, or the file's).")
]
# the noise path audited (_noise_paths)
OptFreshNoise = Annotated[
    bool,
    typer.Option(
        "--fresh-noise",
        help="Audit the fresh-entropy noise path (production) instead of seeded streams.",
    ),
]
OptKeyed = Annotated[
    bool,
    typer.Option(
        "--keyed", help="Audit the keyed noise path (the release path with a key; one id per draw)."
    ),
]
OptKeyedGenerators = Annotated[
    Literal["philox", "aes", "both"],
    typer.Option(help="Keyed generator(s) audited with --keyed (both: one audit each)."),
]


@dataclass
class ExitStatus(OptionGroup):
    """Which verdicts make audit exit with an error status (a CI gate): a violation, or
    anything short of consistent."""

    fail_on_violation: Annotated[
        bool,
        typer.Option(
            "--fail-on-violation", help="Exit with status 3 when the verdict is a violation."
        ),
    ] = False
    fail_unless_consistent: Annotated[
        bool,
        typer.Option(
            "--fail-unless-consistent",
            help="Exit with status 3 on a violation and 4 when the audit is inconclusive.",
        ),
    ] = False

    def exit_for(self, verdict: str, results: list[Any]) -> None:
        """Say on stderr what a violation or an inconclusive audit is, and exit with its status
        when the flags ask for it."""
        if verdict == "violation":
            err_console.print(
                "audit: VIOLATION -- the measured privacy is worse than the claim", highlight=False
            )
            if self.fail_on_violation or self.fail_unless_consistent:
                raise typer.Exit(EXIT_VIOLATION)
        elif verdict == "inconclusive":
            worst = next(r for r in results if r.verdict == "inconclusive")
            err_console.print(f"audit: INCONCLUSIVE -- {worst.reason}", highlight=False)
            if self.fail_unless_consistent:
                raise typer.Exit(EXIT_INCONCLUSIVE)


def _from_file(path: Path, mask: Path | None, covariance: Path | None) -> tuple[Any, int]:
    """The mechanism recorded in a protected file's metadata, and the file's input dimension."""
    from ..audit import mechanism_from_config
    from ..data.io import iter_batches, read_metadata

    meta = read_metadata(path)
    config = meta.get("mechanism")
    if not isinstance(config, dict):
        raise ValueError(f"{path} records no mechanism configuration (is it a protected file?).")
    try:
        mech = mechanism_from_config(
            config,
            mask=None if mask is None else str(mask),
            covariance=None if covariance is None else str(covariance),
        )
    except (ValueError, TypeError) as exc:
        raise ValueError(f"cannot rebuild the mechanism recorded in {path}: {exc}") from None
    proj = meta.get("projection")
    if isinstance(proj, dict) and isinstance(proj.get("d"), int):
        return mech, int(proj["d"])
    if isinstance(config.get("input_dim"), int):
        return mech, int(config["input_dim"])
    _, dim, _, batches = iter_batches(path, batch_rows=1)
    if dim <= 0:
        dim = int(next(iter(batches)).X.shape[1])
    return mech, dim


def _fmt_n(n: float | None) -> str:
    if n is None:
        return "-"
    if math.isinf(n):
        return "> 1e26"
    return f"{n:.2g}"


def _print(result: Any) -> None:
    r = result
    unit = f" per unit of {r.metric.split()[0]}" if r.metric else ""
    t = Table(show_header=False, box=None, pad_edge=False)
    noise = r.noise if r.generator is None else f"{r.noise} ({r.generator})"
    t.add_column(style="bold")
    t.add_column()
    t.add_row("mechanism", f"{r.mechanism.get('mechanism')} at d={r.dim}")
    t.add_row("claim", r.guarantee)
    t.add_row("pair", r.pair)
    pair_note = (
        f"; pair {r.pair_epsilon_lower:.4g} at distance {r.distance:.4g}" if r.metric else ""
    )
    t.add_row(
        "audited epsilon",
        f">= {r.epsilon_lower:.4g}{unit} with {r.confidence:.0%} confidence "
        f"(claimed {r.claimed_epsilon:.4g}{', delta ' + format(r.delta, '.3g') if r.delta else ''}"
        f"{pair_note}; {r.score} score)",
    )
    t.add_row(
        "test errors",
        f"{r.false_positives} false positives, {r.false_negatives} false negatives of "
        f"{r.test_samples} per side (upper bounds {r.fpr_upper:.3g}, {r.fnr_upper:.3g})",
    )
    t.add_row("ceiling", f"{r.ceiling:.4g}{unit}: the most {r.test_samples} test draws can certify")
    if r.samples_needed is not None or r.samples_needed_exact is not None:
        lower = "" if r.samples_needed_exact else " (at least; law before renormalisation)"
        t.add_row("N for claim / 2", _fmt_n(r.samples_needed) + " draws per side" + lower)
    if r.epsilon_exact is not None:
        t.add_row(
            "exact for pair",
            f"{r.epsilon_exact:.4g}{unit}: what the score's law gives with no sampling error",
        )
    if r.whitebox is not None:
        wb = r.whitebox
        t.add_row("white-box", f"{wb.verdict}: {wb.reason}")
        for c in wb.checks:
            t.add_row("", c.text())
        for e in wb.estimates:
            t.add_row("", e.text())
        for test in wb.tests:
            t.add_row("", f"{test.name}: p={test.pvalue:.3g} ({'ok' if test.passed else 'FAIL'})")
    t.add_row(
        "samples",
        f"{r.samples} per side ({r.test_samples} test), {noise} noise, {r.seconds:.1f} s",
    )
    for note in r.notes:
        t.add_row("note", note)
    style = _STYLE[r.verdict]
    t.add_row("verdict", f"[{style}]{r.verdict}[/{style}]: {r.reason}")
    if r.verdict == "inconclusive":
        ways = []
        if r.whitebox is not None and r.whitebox.samples_needed is not None:
            ways.append(f"white box: {_fmt_n(r.whitebox.samples_needed)} noise draws")
        if r.needed_samples is not None:
            ways.append(f"sampling: {_fmt_n(r.needed_samples)} draws per side")
        if ways:
            t.add_row("N to decide", "; ".join(ways))
    console.print(t, highlight=False)


@user_errors
@with_option_groups
def audit(
    *,
    mechanism: OptMechanism = None,
    params: MechanismOptions,
    from_file: OptFromFile = None,
    dim: OptDim = None,
    samples: Annotated[int, typer.Option(help="Releases drawn per input of the pair.")] = 100_000,
    distance: Annotated[
        float | None,
        typer.Option(help="Pair distance in the claim's metric (default: the worst case)."),
    ] = None,
    score: Annotated[
        Literal["lr", "logistic", "mlp"],
        typer.Option(
            help="The distinguisher: lr (likelihood ratio of the claimed law), logistic or mlp."
        ),
    ] = "lr",
    confidence: Annotated[float, typer.Option(help="Confidence of the lower bound.")] = 0.95,
    whitebox: Annotated[
        bool, typer.Option("--whitebox/--no-whitebox", help="Check the noise law's parameters.")
    ] = True,
    power: Annotated[
        bool,
        typer.Option(
            "--power", help="Also compute the draws needed for a bound of half the claim."
        ),
    ] = False,
    whitebox_samples: Annotated[
        int | None,
        typer.Option(help="Noise draws for the white-box check (default: --samples, capped)."),
    ] = None,
    resolution: Annotated[
        float,
        typer.Option(
            help="'consistent' needs the privacy the noise gives bounded by this x the claim."
        ),
    ] = 1.25,
    seed: OptSeed = None,
    fresh_noise: OptFreshNoise = False,
    keyed: OptKeyed = False,
    keyed_generator: OptKeyedGenerators = "both",
    as_json: OptJson = False,
    exit_status: ExitStatus,
) -> None:
    """Audit a mechanism: an empirical epsilon lower bound and a white-box noise-law check.

    The verdict is consistent, violation or inconclusive (too few draws, or a claim above what
    they can certify). Exit status 3 for a violation under --fail-on-violation or
    --fail-unless-consistent, 4 for an inconclusive audit under --fail-unless-consistent.
    """
    from ..audit import audit as run_audit

    mech, d = _mechanism_under_audit(
        mechanism, params.kwargs(leave_out=("mask", "covariance")), params.mask,
        params.covariance, from_file, dim,
    )  # fmt: skip
    noise, gens = _noise_paths(keyed=keyed, fresh_noise=fresh_noise, generator=keyed_generator)
    how: dict[str, Any] = {
        "dim": d, "samples": samples, "score": score, "distance": distance,
        "confidence": confidence, "whitebox": whitebox, "whitebox_samples": whitebox_samples,
        "power": power, "noise": noise, "resolution": resolution, "rng": seed,
    }  # fmt: skip
    results = [run_audit(mech, generator=gen, **how) for gen in gens]
    verdict = max((r.verdict for r in results), key=_ORDER.index)
    if as_json:  # several audits (one per keyed generator): the verdict, then each audit
        print_json(
            {"verdict": verdict, "audits": [r.to_dict() for r in results]}
            if keyed
            else results[0].to_dict()
        )
    else:
        for r in results:
            _print(r)
    exit_status.exit_for(verdict, results)


def _mechanism_under_audit(
    mechanism: str | None,
    params: dict[str, Any],
    mask: Path | None,
    covariance: Path | None,
    from_file: Path | None,
    dim: int | None,
) -> tuple[Any, int]:
    """The mechanism to audit and the input dimension: recorded in ``from_file`` (no mechanism
    options then), or built from ``-m`` and its parameters (``dim`` 16 unless given)."""
    from ..mechanisms import get_mechanism

    if from_file is not None:
        given = [f"--{n.replace('_', '-')}" for n, v in params.items() if v is not None]
        if mechanism is not None or given:
            raise ValueError(
                "--from-file takes the mechanism from the file; do not also give "
                + ", ".join((["-m"] if mechanism is not None else []) + given)
                + "."
            )
        mech, file_dim = _from_file(from_file, mask, covariance)
        return mech, file_dim if dim is None else dim
    if mechanism is None:
        raise ValueError("give -m/--mechanism (with its parameters) or --from-file.")
    for name, path in (("mask", mask), ("covariance", covariance)):
        if path is not None and not path.exists():
            raise FileNotFoundError(f"{name} file not found: {path}")
    mech = get_mechanism(
        mechanism,
        **params,
        mask=None if mask is None else str(mask),
        covariance=None if covariance is None else str(covariance),
    )
    return mech, 16 if dim is None else dim


def _noise_paths(*, keyed: bool, fresh_noise: bool, generator: str) -> tuple[str, list[str | None]]:
    """The noise path audited (keyed, fresh or seeded) and the keyed generators, one audit each
    (``[None]`` off the keyed path)."""
    if keyed and fresh_noise:
        raise ValueError("--keyed and --fresh-noise choose different noise paths; give one.")
    if generator != "both" and not keyed:
        raise ValueError(f"--keyed-generator {generator} needs --keyed.")
    noise = "keyed" if keyed else "fresh" if fresh_noise else "seeded"
    if not keyed:
        return noise, [None]
    gens: list[str | None] = ["philox", "aes"] if generator == "both" else [generator]
    if "aes" in gens:  # before the first audit runs, not after it
        from ..core._optional import require

        require("randomgen", "secure", purpose="keyed AES noise (--keyed-generator aes)")
    return noise, gens


def register(app: typer.Typer) -> None:
    """Attach the ``audit`` command to the main app."""
    app.command(name="audit")(audit)
