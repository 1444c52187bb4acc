"""A self-contained HTML report of a sweep: trade-off plots, tables, guarantees, a recommendation.

:func:`write_report` writes ``index.html`` -- one file with inline CSS and the plots embedded as
base64 PNG (no scripts, fonts, style sheets or images are fetched from anywhere), rendered
from a Jinja2 template (autoescaped) -- plus every plot alone as PNG and SVG. It shows

* the recommendation (:mod:`~privembed.evaluation.recommend`): the configurations that meet
  the utility floor *and* the attack ceiling and are Pareto-optimal -- or one plain sentence
  that none does, with the nearest configuration on each side;
* whether each attack beat its blind baseline on the unprotected embeddings; the numbers of
  an attack that did not are labelled "attack too weak: no evidence about protection" and are
  not plotted as leakage;
* utility vs epsilon for every mechanism (mean +- standard deviation over runs, the
  unprotected baseline dashed, floors dotted);
* the leakage-utility frontier (the measured privacy metrics against a utility metric);
* one panel set per mechanism with all its metrics and error bars;
* the table of every configuration with its formal guarantee written out beside its numbers --
  never epsilon alone, since an epsilon of metric privacy per unit of l2 distance, a pure LDP
  epsilon and an (epsilon, delta) pair are different promises. The page fits a 1,280-pixel
  window: the wide table scrolls inside its own box with the configuration column fixed;
* the data description and what every column means.

Plots use matplotlib's Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core._optional import require
from ._report_template import CSS, TEMPLATE
from .privacy import WEAK_ATTACK
from .recommend import (
    KEY_PRIVACY,
    Floor,
    Recommendation,
    is_linkability,
    parse_floors,
    recommend,
)
from .sweep import SweepConfig, SweepResult

__all__ = ["Floor", "Recommendation", "parse_floors", "recommend", "write_report"]

#: utility columns plotted against epsilon (when present), in this order
PLOT_UTILITY = ("knn_overlap@10", "mean_cosine", "sts_pearson", "ndcg@10")

_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def _epsilon_of(result: SweepResult, c: SweepConfig) -> float:
    g = result.guarantee(c)
    return float(getattr(g, "epsilon", math.inf))


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Any:
    require("matplotlib", "report", purpose="plots in reports")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


#: at most this many labelled ticks on a log x axis (more collide: "38380" for 380 and 383.4)
MAX_X_TICKS = 8


def thin_log_ticks(values: Sequence[float], most: int = MAX_X_TICKS) -> list[float]:
    """The swept values to label on a log axis: the smallest, then each value at least
    1/``most`` of the axis' decades beyond the last one kept, so no two labels collide.

    >>> thin_log_ticks([380.0, 383.4, 1000.0, 1001.0, 5000.0])
    [380.0, 1000.0, 5000.0]
    """
    vals = sorted({float(v) for v in values if v > 0 and math.isfinite(v)})
    if len(vals) <= 2:
        return vals
    lo, hi = math.log10(vals[0]), math.log10(vals[-1])
    gap = max(hi - lo, 1e-12) / most
    kept = [vals[0]]
    for v in vals[1:]:
        if math.log10(v) - math.log10(kept[-1]) >= gap:
            kept.append(v)
    return kept


def _log_x(ax: Any, ticks: Sequence[float] = ()) -> None:
    """Log x axis, labelled ticks at (a thinned set of) the swept values, 3 significant digits,
    plain labels (mathtext labels are slow to lay out)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ax.set_xscale("log")
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(thin_log_ticks(ticks)))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _save(fig: Any, out_dir: Path, stem: str) -> tuple[bytes, Path, Path]:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    png = buf.getvalue()
    p_png = out_dir / f"{stem}.png"
    p_svg = out_dir / f"{stem}.svg"
    p_png.write_bytes(png)
    fig.savefig(p_svg, format="svg", metadata={"Creator": None, "Date": None})
    return png, p_png, p_svg


def _colour_map(result: SweepResult) -> dict[str, str]:
    return {f: _COLOURS[i % len(_COLOURS)] for i, f in enumerate(result.families())}


#: per family, besides its colour: a marker, a line style and a hollow or filled marker, so that
#: families whose curves coincide (Laplace and Mahalanobis with an identity covariance) stay
#: visible one over the other
_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
_LINES = ("-", "--", "-.", ":")


def family_styles(result: SweepResult) -> dict[str, dict[str, Any]]:
    """Matplotlib keyword arguments of each family's curve: colour, marker, line style, marker
    fill and size (later families drawn smaller and hollow, on top)."""
    colours = _colour_map(result)
    out = {}
    for i, fam in enumerate(result.families()):
        out[fam] = {
            "color": colours[fam],
            "marker": _MARKERS[i % len(_MARKERS)],
            "ls": _LINES[i % len(_LINES)],
            "ms": max(3.0, 7.0 - i),
            "mfc": "none" if i % 2 else colours[fam],
            "zorder": 2 + i,
        }
    return out


def _curve(result: SweepResult, cs: list[SweepConfig], metric: str) -> tuple[Any, Any, Any]:
    xp = cs[0].x_param
    xs, ms, ss = [], [], []
    for c in cs:
        m, s, n = result.stats(c, metric)
        if n == 0 or xp is None:
            continue
        xs.append(float(c.params[xp]))
        ms.append(m)
        ss.append(s if math.isfinite(s) else 0.0)
    return np.array(xs), np.array(ms), np.array(ss)


def _label(result: SweepResult, metric: str) -> str:
    return metric.replace("_", " ")


def plot_utility_vs_epsilon(
    result: SweepResult, floors: Sequence[Floor], out_dir: Path
) -> tuple[bytes, Path, Path] | None:
    present = [m for m in result.metric_names("utility") if not is_linkability(m)]
    metrics = [m for m in PLOT_UTILITY if m in present] or present[:4]
    fams = {f: cs for f, cs in result.families().items() if cs[0].x_param == "epsilon"}
    if not metrics or not fams:
        return None
    styles = family_styles(result)
    ncol = min(3, len(metrics))
    nrow = math.ceil(len(metrics) / ncol)
    fig = _figure(4.2 * ncol, 3.3 * nrow)
    axes = fig.subplots(nrow, ncol, squeeze=False)
    for i, metric in enumerate(metrics):
        ax = axes[i // ncol][i % ncol]
        for fam, cs in fams.items():
            x, m, s = _curve(result, cs, metric)
            if x.size:
                ax.errorbar(x, m, yerr=s, capsize=3, label=fam, **styles[fam])
        base = result.baseline.get(metric)
        if base is not None:
            ax.axhline(base, color="black", ls="--", lw=1, label="unprotected")
        for f in floors:
            if f.metric == metric:
                ax.axhline(f.value, color="grey", ls=":", lw=1.2, label=f"floor {f.value:g}")
        _log_x(ax, [float(c.params["epsilon"]) for cs in fams.values() for c in cs])
        ax.set_xlabel("ε (the mechanism's own parameter)")
        ax.set_ylabel(_label(result, metric))
        ax.set_title(_label(result, metric), fontsize=10)
        ax.grid(alpha=0.3)
    for j in range(len(metrics), nrow * ncol):
        axes[j // ncol][j % ncol].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.subplots_adjust(
        left=0.07, right=0.98, top=0.93, bottom=0.1 + 0.12 / nrow, hspace=0.45, wspace=0.28
    )
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    return _save(fig, out_dir, "utility_vs_epsilon")


def plot_frontier(
    result: SweepResult,
    rec: Recommendation,
    out_dir: Path,
    *,
    utility: str,
    privacy: str | None,
    why_no_attack: str = "no attack was run",
) -> tuple[bytes, Path, Path] | None:
    """Leakage (an attack column that proved its strength) against utility, one point per
    configuration; without such a column, log10 epsilon (within-family comparisons only)."""
    styles = family_styles(result)
    fig = _figure(6.4, 4.6)
    ax = fig.subplots()
    pareto = {c.key for c in rec.pareto}
    circled = 0
    for fam, cs in result.families().items():
        xs, ys, xe, ye = [], [], [], []
        for c in cs:
            mu, su, nu = result.stats(c, utility)
            if privacy is not None:
                mp, sp, npv = result.stats(c, privacy)
            else:
                mp, sp, npv = math.log10(max(_epsilon_of(result, c), 1e-300)), 0.0, 1
            if nu == 0 or npv == 0 or not (math.isfinite(mu) and math.isfinite(mp)):
                continue
            xs.append(mu)
            ys.append(mp)
            xe.append(su if math.isfinite(su) else 0.0)
            ye.append(sp if math.isfinite(sp) else 0.0)
            if c.key in pareto:
                circled += 1
                ax.scatter(
                    [mu], [mp], s=160, facecolors="none", edgecolors="black", lw=1.5, zorder=20
                )
        if xs:
            ax.errorbar(
                xs, ys, xerr=xe, yerr=ye, capsize=2, lw=1, label=fam, alpha=0.9, **styles[fam]
            )
    for f in rec.floors:
        if f.metric == utility:
            ax.axvspan(f.value, 1.0 if f.value <= 1 else f.value * 1.05, color="green", alpha=0.07)
            ax.axvline(
                f.value, color="green", ls=":", lw=1.2, label=f"floor {f.metric} ≥ {f.value:.3g}"
            )
    for f in rec.ceilings:
        if privacy is not None and f.metric == privacy:
            ax.axhline(
                f.value,
                color="#b30000",
                ls=":",
                lw=1.2,
                label=f"ceiling {f.metric} ≤ {f.value:.3g}",
            )
    if circled:  # the legend names only what is drawn
        ax.scatter(
            [], [], s=160, facecolors="none", edgecolors="black", label="recommended (Pareto)"
        )
    ax.set_xlabel(f"utility: {_label(result, utility)} (higher is better)")
    if privacy is not None:
        ax.set_ylabel(f"leakage: {_label(result, privacy)} (lower is better)")
        ax.set_title("Leakage vs utility (measured by attacks)", fontsize=10)
    else:
        ax.set_ylabel("log10 ε of the guarantee (not comparable across mechanisms)")
        ax.set_title(f"Guarantee vs utility ({why_no_attack})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.12, right=0.97, top=0.93, bottom=0.11)
    return _save(fig, out_dir, "frontier")


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_") or "mechanism"


def plot_family(
    result: SweepResult, family: str, cs: list[SweepConfig], floors: Sequence[Floor], out_dir: Path
) -> tuple[bytes, Path, Path] | None:
    xp = cs[0].x_param
    if xp is None:
        return None
    weak = set(result.weak_columns())
    attacked = bool(result.metric_names("privacy"))
    metrics = [m for m in result.metric_names("utility") if not is_linkability(m)]
    metrics += [m for m in result.metric_names("privacy") if m not in weak]
    metrics = [m for m in metrics if any(result.stats(c, m)[2] for c in cs)]
    if not metrics:
        return None
    colour = _colour_map(result)[family]
    fig = _figure(8.0, 3.6)
    ax_u, ax_p = fig.subplots(1, 2)
    markers = "osD^v<>ph*"
    for ax, kind in ((ax_u, "utility"), (ax_p, "privacy")):
        ms = [m for m in metrics if result.column(m).kind == kind]
        for i, metric in enumerate(ms):
            x, m, s = _curve(result, cs, metric)
            ax.errorbar(
                x, m, yerr=s, marker=markers[i % len(markers)], ms=4, capsize=3, label=metric,
                alpha=0.9,
            )  # fmt: skip
        _log_x(ax, [float(c.params[xp]) for c in cs])
        ax.set_xlabel(xp if xp != "epsilon" else "ε")
        ax.set_title(f"{family}: {'utility' if kind == 'utility' else 'attacks'}", fontsize=10)
        ax.grid(alpha=0.3)
        if ms:
            ax.legend(fontsize=7)
        else:
            text = (
                "every attack too weak:\nno evidence about protection"
                if attacked
                else "no attack was run"
            )
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
        ax.set_ylim(-0.05, 1.05)
    ax_u.spines["top"].set_color(colour)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.14, wspace=0.2)
    return _save(fig, out_dir, f"mechanism_{_slug(family)}")


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    f = float(v)
    if not math.isfinite(f):
        return "–"
    return f"{f:.{digits}f}"


def _pm(mean: float, std: float, n: int) -> str:
    if n == 0 or not math.isfinite(mean):
        return "–"
    if n > 1 and math.isfinite(std):
        return f"{mean:.3f} ± {std:.3f}"
    return f"{mean:.3f}"


def _fmt_val(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_val(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_fmt_val(x) for x in v)
    return str(v)


def _figure_item(png: tuple[bytes, Path, Path], alt: str, caption: str) -> dict[str, Any]:
    return {
        "b64": base64.b64encode(png[0]).decode("ascii"),
        "alt": alt,
        "caption": caption,
        "files": [p.name for p in png[1:]],
    }


def _table_view(result: SweepResult, rec: Recommendation) -> dict[str, Any]:
    """Header, unprotected row and one row per configuration of the "All configurations" table."""
    metrics = result.metric_names("utility") + result.metric_names("privacy")
    metrics += result.metric_names("reference")
    weak = set(result.weak_columns())
    pareto = {c.key for c in rec.pareto}
    feasible = {c.key for c in rec.feasible}
    heads = []
    for m in metrics:
        title = result.column(m).description
        if m in weak:
            title += f" -- {WEAK_ATTACK}"
        heads.append(
            {"name": m, "title": title, "weak": m in weak, "cls": "weak" if m in weak else ""}
        )
    base = [
        {"text": _num(result.baseline.get(m)), "cls": "weak" if m in weak else ""} for m in metrics
    ]
    rows = []
    for c in result.configs:
        g = result.guarantee(c)
        rows.append(
            {
                "label": c.label,
                "star": " ★" if c.key in pareto else "",
                "cls": "pareto" if c.key in pareto else ("" if c.key in feasible else "infeasible"),
                "guarantee": g.short(),
                "guarantee_detail": g.describe(),
                "cells": [
                    {"text": _pm(*result.stats(c, m)), "cls": "weak" if m in weak else ""}
                    for m in metrics
                ],
            }
        )
    return {"metric_heads": heads, "baseline_cells": base, "config_rows": rows}


def _baselines_view(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    keys: dict[str, None] = {}
    for r in rows:
        for k in r:
            keys.setdefault(k, None)

    def cell(v: Any) -> str:
        if v is None:
            return "–"
        return _num(v) if isinstance(v, float) else str(v)

    return {"columns": list(keys), "rows": [[cell(r.get(k)) for k in keys] for r in rows]}


def frontier_axes(
    result: SweepResult,
    rec: Recommendation,
    utility_metric: str | None = None,
    privacy_metric: str | None = None,
) -> tuple[str | None, str | None]:
    """The frontier plot's axes: the first utility axis of the recommendation, and the first
    attack column (preferring :data:`~privembed.evaluation.recommend.KEY_PRIVACY`) of an attack
    that proved its strength -- never a weak attack's column."""
    u_metric = utility_metric or (rec.utility_axes[0] if rec.utility_axes else None)
    evidence = result.evidence_columns()
    if privacy_metric is not None:
        if privacy_metric in result.weak_columns():
            raise ValueError(
                f"{privacy_metric} comes from an attack too weak to be evidence; it is not "
                "plotted as leakage."
            )
        p_metric: str | None = privacy_metric
    else:
        p_metric = next((m for m in KEY_PRIVACY if m in evidence), None)
        if p_metric is None and evidence:
            p_metric = evidence[0]
    for name in (u_metric, p_metric):
        if name is not None and name not in result.metric_names():
            raise ValueError(f"the sweep has no column {name!r}.")
    return u_metric, p_metric


def write_report(
    result: SweepResult,
    out_dir: str | Path,
    *,
    floors: Sequence[Floor] = (),
    ceilings: Sequence[Floor] | None = None,
    recommendation: Recommendation | None = None,
    utility_metric: str | None = None,
    privacy_metric: str | None = None,
    title: str = "privembed privacy–utility report",
    text_baselines: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
    deployment: Any = None,
) -> Path:
    """Write ``index.html`` and the plots (PNG + SVG) into ``out_dir``; returns the HTML path.

    Parameters
    ----------
    result : SweepResult
    out_dir : path
    floors, ceilings : sequence of Floor
        Utility floors and attack ceilings of the recommendation (see
        :func:`~privembed.evaluation.recommend.recommend`; default ceilings from the attacks).
    recommendation : Recommendation, optional
        Use this one instead of computing it from ``floors`` and ``ceilings``.
    utility_metric, privacy_metric : str, optional
        Axes of the frontier plot (default: the first floored utility metric, else
        ``knn_overlap@10``; the token leakage if that attack proved its strength, else the
        linkage re-identification). A weak attack's column is refused.
    text_baselines : sequence of dict, optional
        Rows of text-level baselines (:mod:`privembed.evaluation.baselines`) to show.
    notes : sequence of str
        Extra paragraphs (e.g. warnings from the command line).
    deployment : ModesAdvice, optional
        The deployment recommendation (:func:`~privembed.evaluation.modes.advise_modes`, what
        ``privembed advise`` prints for the same input): shown first, with every mode's
        setting, cost per query and the threat verdicts.
    """
    from .. import __version__
    from ..data.io import atomic_output

    jinja2 = require("jinja2", "report", purpose="HTML reports")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = (
        recommendation
        if recommendation is not None
        else recommend(result, floors, ceilings=ceilings)
    )
    u_metric, p_metric = frontier_axes(result, rec, utility_metric, privacy_metric)
    figures = _figures(result, rec, out, u_metric, p_metric)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string(TEMPLATE).render(
        title=title,
        css=CSS,
        version=__version__,
        now=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        n_configs=len(result.configs),
        runs=result.settings.get("runs"),
        notes=list(notes),
        rec=rec,
        sentence=rec.sentence(result),
        recommended=_recommended_view(result, rec),
        nearest=rec.nearest_lines(result),
        checks=_checks_view(result),
        weak_label=WEAK_ATTACK,
        data=_data_view(result),
        sweep=_sweep_view(result),
        figures=figures,
        baselines=_baselines_view(text_baselines),
        column_rows=_columns_view(result),
        deployment=_deployment_view(deployment),
        **_table_view(result, rec),
    )
    with atomic_output(out / "index.html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out / "index.html"


def _figures(
    result: SweepResult,
    rec: Recommendation,
    out: Path,
    u_metric: str | None,
    p_metric: str | None,
) -> list[dict[str, Any]]:
    """The plots, written into ``out``, with their captions: utility vs epsilon, the frontier,
    one panel set per mechanism family."""
    weak_all = bool(result.checks) and not any(c.passed for c in result.checks.values())
    why = "every attack too weak to be evidence" if weak_all else "no attack was run"
    figures: list[dict[str, Any]] = []
    u = plot_utility_vs_epsilon(result, rec.floors, out)
    if u is not None:
        figures.append(
            _figure_item(
                u,
                "utility vs epsilon",
                "Utility vs ε per mechanism: mean ± standard deviation over runs; dashed: "
                "unprotected embeddings; dotted: your floor. ε is each mechanism's own parameter "
                "and means different things for different guarantee types (see the table).",
            )
        )
    if u_metric is not None:
        fr = plot_frontier(result, rec, out, utility=u_metric, privacy=p_metric, why_no_attack=why)
        if fr is not None:
            figures.append(
                _figure_item(
                    fr,
                    "leakage vs utility frontier",
                    "Each point is one configuration (mean ± std over runs); circled: recommended "
                    "(Pareto-optimal among those meeting the floor and the ceiling); dotted: the "
                    "floor (green) and the ceiling (red)."
                    + (f" No attack column is plotted: {why}." if p_metric is None else ""),
                )
            )
    for fam, cs in result.families().items():
        f = plot_family(result, fam, cs, rec.floors, out)
        if f is not None:
            figures.append(
                _figure_item(f, f"{fam} curves", f"{fam}: every metric vs its parameter, ± std.")
            )
    return figures


def _data_view(result: SweepResult) -> list[tuple[str, str]]:
    """The "Data" table: the sweep's data description, its shape and fingerprint."""
    s = result.settings
    data = {
        **result.description,
        "rows × dimension": f"{s.get('n')} × {s.get('d')}",
        "data SHA-256": str(s.get("data_sha256", ""))[:16] + "…",
    }
    return [(k, _fmt_val(v)) for k, v in data.items()]


def _sweep_view(result: SweepResult) -> list[tuple[str, str]]:
    """The "Sweep settings" table."""
    s = result.settings
    sweep = {
        "runs per configuration": s.get("runs"),
        "seed": s.get("seed"),
        "configurations": len(result.configs),
        "queries for ranking metrics": (s.get("utility") or {}).get("n_queries"),
        "tie policy": (s.get("utility") or {}).get("ties"),
        "privacy metrics": ", ".join(s.get("privacy") or []) or "none",
        "wall time (s)": round(float(s.get("wall_seconds", 0.0)), 1),
    }
    return [(k, _fmt_val(v)) for k, v in sweep.items()]


def _deployment_view(advice: Any) -> dict[str, Any] | None:
    """The deployment recommendation's sentence, one row per mode with its cost, and the
    recommended setting's threat verdicts (None: not made)."""
    if advice is None:
        return None
    r = advice.recommended
    rows = []
    for st in advice.settings:
        eps = "—" if st.epsilon is None else f"{st.epsilon:.4g}"
        rows.append(
            {
                "label": st.label,
                "recommended": r is not None and st is r,
                "meets": st.meets_floor,
                "epsilon": eps if st.mode != "sealed" else "none (encrypted)",
                "depth": st.depth if st.meets_floor else "—",
                "utility": "—" if st.utility != st.utility else f"{st.utility:.3f}",
                "guarantee": st.guarantee_short or "—",
                "cost": "—" if st.cost is None else st.cost.text(),
                "note": "; ".join(st.notes),
            }
        )
    verdicts = [
        {"threat": v.threat.title, "verdict": v.verdict, "reason": v.reason}
        for v in (r.verdicts if r is not None else [])
    ]
    reasons = {v["reason"] for v in verdicts}
    return {
        "sentence": advice.sentence(),
        "floor": advice.floor_text(),
        "rows": rows,
        "verdicts": verdicts,
        # one reason for every threat (the sealed mode's): said once, above the list
        "one_reason": reasons.pop() if len(verdicts) > 1 and len(reasons) == 1 else None,
    }


def _recommended_view(result: SweepResult, rec: Recommendation) -> list[dict[str, Any]]:
    """One item per recommended configuration: its numbers on every axis and its guarantee."""
    metrics = dict.fromkeys(
        [*rec.utility_axes, *(f.metric for f in rec.ceilings), *rec.privacy_axes]
    )
    return [
        {
            "label": c.label,
            "numbers": ", ".join(f"{m} {_pm(*result.stats(c, m))}" for m in metrics),
            "guarantee": result.guarantee(c).describe(),
        }
        for c in rec.pareto
    ]


def _checks_view(result: SweepResult) -> list[dict[str, Any]]:
    """The attack checks: did each attack beat its blind baseline on the plain embeddings?"""
    return [
        {
            "attack": c.attack,
            "statistic": c.statistic,
            "value": _num(c.value),
            "chance": _num(c.chance),
            "interval": f"[{c.excess_low:+.3f}, {c.excess_high:+.3f}]",
            "passed": c.passed,
            "verdict": "beats chance" if c.passed else WEAK_ATTACK,
            "method": c.method,
        }
        for c in result.checks.values()
    ]


def _columns_view(result: SweepResult) -> list[dict[str, Any]]:
    """The "What the columns mean" table: kind, attack status and description of each column."""
    return [
        {
            "name": m,
            "kind": result.column(m).kind,
            "status": result.attack_status(m) or "–",
            "weak": result.attack_status(m) == WEAK_ATTACK,
            "description": result.column(m).description,
        }
        for m in result.metric_names()
    ]
