"""A self-contained HTML report of a sweep: trade-off plots, tables, guarantees, a recommendation.

:func:`write_report` writes ``index.html`` -- one file with inline CSS and the plots embedded as
base64 PNG (no scripts, fonts, style sheets or images are fetched from anywhere) -- plus every
plot alone as PNG and SVG. It shows

* the recommendation: the configurations that meet the user's floors (e.g. top-1 >= 0.9) and
  are Pareto-optimal -- no other feasible configuration has at least the utility and at most
  the measured leakage on every axis and is strictly better on one;
* utility vs epsilon for every mechanism (mean +- standard deviation over runs, the
  unprotected baseline dashed, floors dotted);
* the leakage-utility frontier (the measured privacy metrics against a utility metric);
* one panel set per mechanism with all its metrics and error bars;
* the table of every configuration with its formal guarantee written out beside its numbers --
  never epsilon alone, since an epsilon of metric privacy per unit of l2 distance, a pure LDP
  epsilon and an (epsilon, delta) pair are different promises;
* the data description and what every column means.

Plots use matplotlib's Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._optional import require
from .sweep import SweepConfig, SweepResult

__all__ = ["Floor", "Recommendation", "parse_floors", "recommend", "write_report"]

#: utility columns shown first (when present), in this order
KEY_UTILITY = (
    "top1_originals",
    "top1_protected",
    "mean_cosine",
    "knn_overlap@10",
    "sts_pearson",
    "ndcg@10",
)
#: privacy columns preferred for the frontier's risk axis
KEY_PRIVACY = ("leakage", "reid@1", "auc_sensitive", "confidence")

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


@dataclass(frozen=True)
class Floor:
    """A requirement on a metric's mean: ``>= value`` (``op=">="``) or ``<= value``."""

    metric: str
    op: str
    value: float

    def ok(self, mean: float) -> bool:
        if not math.isfinite(mean):
            return False
        return mean >= self.value if self.op == ">=" else mean <= self.value

    def text(self) -> str:
        return f"{self.metric} {'≥' if self.op == '>=' else '≤'} {self.value:g}"


def parse_floors(specs: Sequence[str]) -> list[Floor]:
    """Parse ``"top1_originals>=0.9"`` / ``"leakage<=0.2"`` strings.

    Examples
    --------
    >>> parse_floors(["top1_originals>=0.9", "leakage <= 0.2"])
    [Floor(metric='top1_originals', op='>=', value=0.9), Floor(metric='leakage', op='<=', value=0.2)]
    """
    out = []
    for s in specs:
        m = re.fullmatch(r"\s*([\w@.\-]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*", s)
        if not m:
            raise ValueError(
                f"a floor must look like 'metric>=value' or 'metric<=value', got {s!r}."
            )
        out.append(Floor(m.group(1), m.group(2), float(m.group(3))))
    return out


@dataclass(frozen=True)
class Recommendation:
    """Feasible and Pareto-optimal configurations for a set of floors.

    Attributes
    ----------
    floors : list of Floor
    feasible : list of SweepConfig
        Configurations whose means meet every floor.
    pareto : list of SweepConfig
        The feasible configurations no other feasible one dominates.
    utility_axes, privacy_axes : list of str
        The metrics compared (maximised / minimised).
    note : str
        How the comparison was made (and its limits).
    """

    floors: list[Floor]
    feasible: list[SweepConfig]
    pareto: list[SweepConfig]
    utility_axes: list[str]
    privacy_axes: list[str]
    note: str


def _utility_axes(result: SweepResult, floors: Sequence[Floor]) -> list[str]:
    present = result.metric_names("utility")
    axes = [f.metric for f in floors if f.metric in present and f.op == ">="]
    for k in KEY_UTILITY:
        if k in present and not axes:
            axes.append(k)
    return axes or present[:1]


def _privacy_axes(result: SweepResult) -> list[str]:
    return result.metric_names("privacy")


def _epsilon_of(result: SweepResult, c: SweepConfig) -> float:
    g = result.guarantee(c)
    eps = getattr(g, "epsilon", math.inf)
    return float(eps)


def recommend(result: SweepResult, floors: Sequence[Floor] = ()) -> Recommendation:
    """The configurations that meet ``floors`` and are Pareto-optimal.

    Utility axes are the floored utility metrics (default: top-1 self-retrieval); privacy axes
    are the measured privacy metrics (attack results, lower is better). Without any privacy
    metric the comparison falls back to each configuration's own epsilon *within its family*
    (the most private feasible configuration of every mechanism), because epsilons of different
    guarantee types cannot be compared.
    """
    names = set(result.metric_names())
    for f in floors:
        if f.metric not in names:
            raise ValueError(
                f"floor on {f.metric!r}, but the sweep has no such column (it has: "
                f"{', '.join(sorted(names))})."
            )
    feasible = [
        c for c in result.configs if all(f.ok(result.stats(c, f.metric)[0]) for f in floors)
    ]
    u_axes = _utility_axes(result, floors)
    p_axes = _privacy_axes(result)
    if p_axes:

        def vec(c: SweepConfig) -> list[float]:
            u = [result.stats(c, m)[0] for m in u_axes]
            p = [-result.stats(c, m)[0] for m in p_axes]
            return [v if math.isfinite(v) else -math.inf for v in u + p]

        vecs = {c.key: vec(c) for c in feasible}
        fam = {c.key: f for f, cs in result.families().items() for c in cs}
        eps = {c.key: _epsilon_of(result, c) for c in feasible}

        def dominates(o: SweepConfig, c: SweepConfig) -> bool:
            a, b = vecs[o.key], vecs[c.key]
            if fam[o.key] == fam[c.key]:  # one family: its epsilons are comparable
                a, b = [*a, -eps[o.key]], [*b, -eps[c.key]]
            return all(x >= y for x, y in zip(a, b, strict=True)) and any(
                x > y for x, y in zip(a, b, strict=True)
            )

        pareto = [
            c for c in feasible if not any(dominates(o, c) for o in feasible if o.key != c.key)
        ]
        note = (
            f"Pareto-optimal among the feasible configurations on utility ({', '.join(u_axes)}: "
            f"higher is better) and measured leakage ({', '.join(p_axes)}: lower is better), "
            "using the means over runs; within one mechanism family a smaller epsilon (a "
            "stronger guarantee of the same type) also counts as better."
        )
    else:
        pareto = []
        for _fam, cs in result.families().items():
            ok = [c for c in cs if c in feasible]
            if ok:
                pareto.append(min(ok, key=lambda c: _epsilon_of(result, c)))
        note = (
            "No attack was run, so leakage could not be compared across mechanisms; within each "
            "mechanism the feasible configuration with the smallest epsilon is listed. Epsilons "
            "of different guarantee types (metric privacy per unit distance, pure LDP, "
            "(epsilon, delta)-LDP) are not comparable: read the guarantee column."
        )
    return Recommendation(list(floors), feasible, pareto, u_axes, p_axes, note)


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


def _log_x(ax: Any, ticks: Sequence[float] = ()) -> None:
    """Log x axis, ticks at the swept values, plain labels (mathtext labels are slow to lay out)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ax.set_xscale("log")
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(ticks))))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
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
    present = result.metric_names("utility")
    metrics = [m for m in KEY_UTILITY if m in present] or present[:4]
    fams = {f: cs for f, cs in result.families().items() if cs[0].x_param == "epsilon"}
    if not metrics or not fams:
        return None
    colours = _colour_map(result)
    ncol = min(3, len(metrics))
    nrow = math.ceil(len(metrics) / ncol)
    fig = _figure(4.2 * ncol, 3.3 * nrow)
    axes = fig.subplots(nrow, ncol, squeeze=False)
    for i, metric in enumerate(metrics):
        ax = axes[i // ncol][i % ncol]
        for fam, cs in fams.items():
            x, m, s = _curve(result, cs, metric)
            if x.size:
                ax.errorbar(
                    x, m, yerr=s, marker="o", ms=4, capsize=3, label=fam, color=colours[fam]
                )
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
) -> tuple[bytes, Path, Path] | None:
    colours = _colour_map(result)
    fig = _figure(6.4, 4.6)
    ax = fig.subplots()
    pareto = {c.key for c in rec.pareto}
    feasible = {c.key for c in rec.feasible}
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
                ax.scatter(
                    [mu], [mp], s=160, facecolors="none", edgecolors="black", lw=1.5, zorder=4
                )
            elif c.key not in feasible:
                pass
        if xs:
            ax.errorbar(
                xs, ys, xerr=xe, yerr=ye, fmt="o-", ms=4, capsize=2, lw=1, label=fam,
                color=colours[fam], alpha=0.9,
            )  # fmt: skip
    for f in rec.floors:
        if f.metric == utility:
            ax.axvspan(f.value, 1.0 if f.value <= 1 else f.value * 1.05, color="green", alpha=0.07)
            ax.axvline(f.value, color="green", ls=":", lw=1.2, label=f"floor {f.text()}")
    ax.scatter([], [], s=160, facecolors="none", edgecolors="black", label="recommended (Pareto)")
    ax.set_xlabel(f"utility: {_label(result, utility)} (higher is better)")
    if privacy is not None:
        ax.set_ylabel(f"leakage: {_label(result, privacy)} (lower is better)")
        ax.set_title("Leakage vs utility (measured by attacks)", fontsize=10)
    else:
        ax.set_ylabel("log10 ε of the guarantee (not comparable across mechanisms)")
        ax.set_title("Guarantee vs utility (no attack was run)", fontsize=10)
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
    metrics = result.metric_names("utility") + result.metric_names("privacy")
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
            ax.text(0.5, 0.5, "no attack was run", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylim(-0.05, 1.05)
    ax_u.spines["top"].set_color(colour)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.14, wspace=0.2)
    return _save(fig, out_dir, f"mechanism_{_slug(family)}")


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1180px;
padding:1.2em 2em;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.82em;margin:.6em 0}
th,td{border:1px solid #d6d6d6;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}
tr.pareto td{background:#eef8ee}tr.infeasible td{color:#888}
.box{border:2px solid #2c7a2c;border-radius:6px;padding:.6em 1em;background:#f6fbf6}
.warn{border-color:#b36b00;background:#fff8ec}
.muted{color:#666;font-size:.9em}figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
code{background:#f4f4f4;padding:0 .2em}details{margin:.3em 0}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


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


def _img(png: bytes, alt: str, caption: str, files: Sequence[Path]) -> str:
    b64 = base64.b64encode(png).decode("ascii")
    names = ", ".join(f"<code>{_e(p.name)}</code>" for p in files)
    return (
        f'<figure><img src="data:image/png;base64,{b64}" alt="{_e(alt)}">'
        f"<figcaption class='muted'>{_e(caption)} Also written alone: {names}.</figcaption></figure>"
    )


def _kv_table(items: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(_fmt_val(v))}</td></tr>"
        for k, v in items.items()
    )
    return f"<table>{rows}</table>"


def _fmt_val(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_val(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_fmt_val(x) for x in v)
    return str(v)


def _config_table(result: SweepResult, rec: Recommendation) -> str:
    metrics = result.metric_names("utility") + result.metric_names("privacy")
    metrics += result.metric_names("reference")
    pareto = {c.key for c in rec.pareto}
    feasible = {c.key for c in rec.feasible}
    fams = {c.key: f for f, cs in result.families().items() for c in cs}
    head = (
        "<tr><th class='l'>mechanism</th><th class='l'>parameters</th>"
        "<th class='l'>formal guarantee (one release)</th>"
        + "".join(f"<th title='{_e(result.column(m).description)}'>{_e(m)}</th>" for m in metrics)
        + "</tr>"
    )
    base = (
        "<tr><td class='l'>none</td><td class='l'>unprotected</td>"
        "<td class='l'>no protection</td>"
        + "".join(f"<td>{_num(result.baseline.get(m))}</td>" for m in metrics)
        + "</tr>"
    )
    rows = [head, base]
    for c in result.configs:
        g = result.guarantee(c)
        cls = "pareto" if c.key in pareto else ("" if c.key in feasible else "infeasible")
        star = " ★" if c.key in pareto else ""
        params = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.params.items()
        )
        cells = "".join(f"<td>{_pm(*result.stats(c, m))}</td>" for m in metrics)
        rows.append(
            f"<tr class='{cls}'><td class='l'>{_e(fams.get(c.key, c.mechanism))}{star}</td>"
            f"<td class='l'>{_e(params)}</td>"
            f"<td class='l'><b>{_e(g.short())}</b><br><span class='muted'>{_e(g.describe())}</span></td>"
            f"{cells}</tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _baseline_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    keys: dict[str, None] = {}
    for r in rows:
        for k in r:
            keys.setdefault(k, None)
    head = "<tr>" + "".join(f"<th class='l'>{_e(k)}</th>" for k in keys) + "</tr>"
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='l'>{_e(_num(r.get(k)) if isinstance(r.get(k), float) else (r.get(k) if r.get(k) is not None else '–'))}</td>"
            for k in keys
        )
        + "</tr>"
        for r in rows
    )
    return "<table>" + head + body + "</table>"


def _recommendation_html(result: SweepResult, rec: Recommendation) -> str:
    floors = ", ".join(f.text() for f in rec.floors) or "no floor given"
    if not rec.feasible:
        best = []
        for m in [f.metric for f in rec.floors]:
            col = result.column(m)
            vals = [(result.stats(c, m)[0], c) for c in result.configs]
            vals = [(v, c) for v, c in vals if math.isfinite(v)]
            if vals:
                v, c = (max if col.higher_is_better else min)(vals, key=lambda t: t[0])
                best.append(f"best {m}: {v:.3f} ({c.label})")
        return (
            f"<div class='box warn'><b>No configuration meets {_e(floors)}.</b> "
            f"{_e('; '.join(best))}. Relax the floor or add weaker (larger ε) configurations.</div>"
        )
    items = []
    for c in rec.pareto:
        g = result.guarantee(c)
        nums = ", ".join(
            f"{m} {_pm(*result.stats(c, m))}" for m in rec.utility_axes + rec.privacy_axes
        )
        items.append(
            f"<li><b>{_e(c.label)}</b> — {_e(nums)}<br><span class='muted'>guarantee: "
            f"{_e(g.describe())}</span></li>"
        )
    return (
        f"<div class='box'><b>Recommended for {_e(floors)}</b> "
        f"({len(rec.feasible)} of {len(result.configs)} configurations meet it):"
        f"<ul>{''.join(items)}</ul><p class='muted'>{_e(rec.note)}</p></div>"
    )


def write_report(
    result: SweepResult,
    out_dir: str | Path,
    *,
    floors: Sequence[Floor] = (),
    utility_metric: str | None = None,
    privacy_metric: str | None = None,
    title: str = "privembed privacy–utility report",
    text_baselines: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
) -> Path:
    """Write ``index.html`` and the plots (PNG + SVG) into ``out_dir``; returns the HTML path.

    Parameters
    ----------
    result : SweepResult
    out_dir : path
    floors : sequence of Floor
        Requirements for the recommendation (see :func:`parse_floors`).
    utility_metric, privacy_metric : str, optional
        Axes of the frontier plot (default: the first floored utility metric, else top-1
        self-retrieval; the token leakage if measured, else the linkage re-identification).
    text_baselines : sequence of dict, optional
        Rows of text-level baselines (:mod:`privembed.evaluation.baselines`) to show.
    notes : sequence of str
        Extra paragraphs (e.g. warnings from the command line).
    """
    from .. import __version__
    from ..io import atomic_output

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = recommend(result, floors)
    u_metric = utility_metric or (rec.utility_axes[0] if rec.utility_axes else None)
    present_priv = result.metric_names("privacy")
    p_metric = privacy_metric or next((m for m in KEY_PRIVACY if m in present_priv), None)
    if p_metric is None and present_priv:
        p_metric = present_priv[0]
    for name in (u_metric, p_metric):
        if name is not None and name not in result.metric_names():
            raise ValueError(f"the sweep has no column {name!r}.")

    figures: list[str] = []
    u = plot_utility_vs_epsilon(result, floors, out)
    if u is not None:
        figures.append(
            _img(
                u[0],
                "utility vs epsilon",
                "Utility vs ε per mechanism: mean ± standard deviation over runs; dashed: "
                "unprotected embeddings; dotted: your floor. ε is each mechanism's own parameter "
                "and means different things for different guarantee types (see the table).",
                u[1:],
            )
        )
    if u_metric is not None:
        fr = plot_frontier(result, rec, out, utility=u_metric, privacy=p_metric)
        if fr is not None:
            figures.append(
                _img(
                    fr[0],
                    "leakage vs utility frontier",
                    "Each point is one configuration (mean ± std over runs); circled: recommended "
                    "(Pareto-optimal among those meeting the floors)."
                    + (
                        " Re-identification by linkage is top-1 retrieval read from the attacker's "
                        "side, so these points lie on the diagonal: what makes a protected vector "
                        "findable makes it linkable."
                        if (u_metric, p_metric) == ("top1_originals", "reid@1")
                        else ""
                    ),
                    fr[1:],
                )
            )
    for fam, cs in result.families().items():
        f = plot_family(result, fam, cs, floors, out)
        if f is not None:
            figures.append(
                _img(f[0], f"{fam} curves", f"{fam}: every metric vs its parameter, ± std.", f[1:])
            )

    s = result.settings
    desc = dict(result.description)
    data = {
        **desc,
        "rows × dimension": f"{s.get('n')} × {s.get('d')}",
        "data SHA-256": str(s.get("data_sha256", ""))[:16] + "…",
    }
    sweep = {
        "runs per configuration": s.get("runs"),
        "seed": s.get("seed"),
        "configurations": len(result.configs),
        "queries for ranking metrics": (s.get("utility") or {}).get("n_queries"),
        "tie policy": (s.get("utility") or {}).get("ties"),
        "privacy metrics": ", ".join(s.get("privacy") or []) or "none",
        "wall time (s)": round(float(s.get("wall_seconds", 0.0)), 1),
    }
    col_rows = "".join(
        f"<tr><td class='l'><code>{_e(m)}</code></td><td class='l'>{_e(result.column(m).kind)}</td>"
        f"<td class='l'>{_e(result.column(m).description)}</td></tr>"
        for m in result.metric_names()
    )
    note_html = "".join(f"<div class='box warn'>{_e(n)}</div>" for n in notes)
    if not present_priv:
        note_html += (
            "<div class='box warn'>No attack was run on these releases (pass texts for token "
            "inference, or keep the linkage attack on): the privacy side of this report is the "
            "formal guarantee only.</div>"
        )
    baseline_html = ""
    if text_baselines:
        baseline_html = (
            "<h2>Text-level baselines</h2><p class='muted'>Sanitising the text before embedding "
            "([T26] App. F.3, Table 9). R = ΔLeakage / ΔUtility relative to the unprotected "
            "embeddings: leakage removed per unit of utility lost (higher is better).</p>"
            + _baseline_table(text_baselines)
        )
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="muted">privembed {_e(__version__)} · generated {_e(now)} · {len(result.configs)} configurations × {_e(s.get("runs"))} runs</p>
{note_html}
<h2>Recommendation</h2>
{_recommendation_html(result, rec)}
<h2>Data</h2>
{_kv_table(data)}
<h2>Trade-off plots</h2>
{"".join(figures)}
<h2>All configurations</h2>
<p class="muted">Mean ± sample standard deviation over runs. ★ / green: recommended; grey: misses a floor.
Every number stands beside the guarantee its configuration gives for one release of a record
(repeated fresh releases compose: see the ledger).</p>
{_config_table(result, rec)}
{baseline_html}
<h2>Sweep settings</h2>
{_kv_table(sweep)}
<h2>What the columns mean</h2>
<table><tr><th class='l'>column</th><th class='l'>kind</th><th class='l'>meaning</th></tr>{col_rows}</table>
<p class="muted">Files next to this page: results.csv (tidy: one row per configuration and metric), results.parquet, results.json, runs.csv, and every plot as PNG and SVG.</p>
</body></html>
"""
    with atomic_output(out / "index.html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out / "index.html"
