r"""Analysis of word-level sanitisers on a vocabulary ([A26] §2, §4–7).

* :func:`output_proportions` -- for random words and each epsilon, the share of outputs that are
  the original word, one of its ``neighbours`` nearest neighbours (100 in [A26]), or any other
  word; for the nearest-word mechanism ([A26] Fig. 2), the rank fix (Fig. 8) and the SanText
  exponential mechanism (Fig. 9).
* :func:`calibrate_rank_c` -- picks the rank temperature ``c`` from those proportions.
* :func:`neighbour_gaps` -- the neighbour-gap statistics of [A26] Table 2.
* :func:`dot_product_summary` -- the noisy dot-product law at the measured gaps.
* :func:`plot_proportions`, :func:`plot_dot_cdf` -- figures (matplotlib, ``privembed[report]``).

Words are drawn uniformly without replacement from the whole vocabulary, as in [A26]'s
experiments (so most are rare words).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int, check_keywords, check_real
from ..core.rng import as_generator
from . import dx_theory
from .exponential import sample_exponential
from .index import NearestNeighbourIndex
from .sanitizer import WordSanitizer
from .vocab import Vocabulary

__all__ = [
    "MECHANISM_NAMES",
    "NeighbourGaps",
    "RankCalibration",
    "Table",
    "WordSample",
    "calibrate_rank_c",
    "dot_product_summary",
    "neighbour_gaps",
    "neighbour_lists",
    "output_proportions",
    "plot_dot_cdf",
    "plot_proportions",
    "rank_fix_shares",
    "sample_words",
]

MECHANISM_NAMES = ("nearest", "rank", "exponential")
CATEGORIES = ("original", "neighbours", "other")


# ---------------------------------------------------------------------------------------------
# a small tidy table
# ---------------------------------------------------------------------------------------------


@dataclass
class Table:
    """Rows of named values, written as CSV or as a markdown table.

    Examples
    --------
    >>> t = Table(columns=["eps", "p"], rows=[{"eps": 1.0, "p": 0.25}])
    >>> print(t.to_markdown())
    | eps | p |
    |---:|---:|
    | 1 | 0.25 |
    """

    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def column(self, name: str) -> list[Any]:
        """The values of one column."""
        return [r.get(name) for r in self.rows]

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the table as CSV (floats with full precision)."""
        with Path(path).open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            for r in self.rows:
                writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in self.columns})

    def to_markdown(self, digits: int = 4) -> str:
        """A markdown table (numbers to ``digits`` significant digits)."""

        def fmt(v: Any) -> str:
            if v is None:
                return ""
            if isinstance(v, float | np.floating):
                return f"{float(v):.{digits}g}"
            return str(v)

        numeric = [
            all(
                isinstance(r.get(c), int | float | np.number)
                for r in self.rows
                if r.get(c) is not None
            )
            for c in self.columns
        ]
        head = "| " + " | ".join(self.columns) + " |"
        align = "|" + "|".join("---:" if num else "---" for num in numeric) + "|"
        body = ["| " + " | ".join(fmt(r.get(c)) for c in self.columns) + " |" for r in self.rows]
        return "\n".join([head, align, *body])


# ---------------------------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------------------------


class WordSample(TypedDict, total=False):
    """Which words an analysis looks at, and through which index: the keywords
    :func:`output_proportions` and :func:`neighbour_gaps` share (all optional).

    Attributes
    ----------
    n_words : int
        Random words (ignored when ``words`` is given; each analysis has its own default).
    words : array_like of int, optional
        Vocabulary rows to use instead of a random sample.
    index : NearestNeighbourIndex, optional
        Search index over the vocabulary (default: exact).
    rng : int, numpy.random.Generator or None
    """

    n_words: int
    words: Any
    index: NearestNeighbourIndex | None
    rng: Any


def _sampled(
    vocabulary: Vocabulary, sample: WordSample, n_words: int, gen: np.random.Generator
) -> tuple[NDArray[np.int64], NearestNeighbourIndex]:
    """The rows ``sample`` names (``words``, else its ``n_words`` -- default ``n_words`` --
    drawn with ``gen``) and its index (else an exact one over the vocabulary)."""
    words = sample.get("words")
    ids = (
        sample_words(vocabulary, sample.get("n_words", n_words), rng=gen)
        if words is None
        else np.asarray(words, dtype=np.int64)
    )
    index = sample.get("index")
    return ids, NearestNeighbourIndex(vocabulary.vectors) if index is None else index


def sample_words(vocabulary: Vocabulary, n_words: int, *, rng: Any = None) -> NDArray[np.int64]:
    """``n_words`` distinct vocabulary rows drawn uniformly (as in [A26]'s experiments)."""
    n_words = check_int("n_words", n_words, ge=1, le=len(vocabulary))
    gen = as_generator(rng)
    return np.sort(gen.choice(len(vocabulary), size=n_words, replace=False)).astype(np.int64)


def neighbour_lists(index: NearestNeighbourIndex, ids: Any, k: int) -> NDArray[np.int64]:
    """Row ``i``: ``[ids[i], its 1st, ..., k-th nearest neighbour]``, shape (n, k + 1).

    The word itself is put first even when another word has an identical vector.
    """
    ids = np.asarray(ids, dtype=np.int64)
    k = check_int("k", k, ge=1, le=index.size - 1)
    _, found = index.search(index.vectors[ids], min(k + 2, index.size))
    out = np.empty((ids.size, k + 1), dtype=np.int64)
    out[:, 0] = ids
    for i in range(ids.size):
        row = found[i][(found[i] != ids[i]) & (found[i] >= 0)]
        if row.size < k:  # approximate index came up short: recompute this row exactly
            d2 = index.distance_rows(index.vectors[ids[i]])[0]
            d2[ids[i]] = np.inf
            row = np.argsort(d2, kind="stable")
        out[i, 1:] = row[:k]
    return out


def _categorise(outputs: NDArray[np.int64], lists: NDArray[np.int64]) -> dict[str, float]:
    original = outputs == lists[:, 0]
    near = (lists[:, 1:] == outputs[:, None]).any(axis=1)
    n = outputs.size
    return {
        "original": float(original.sum() / n),
        "neighbours": float(near.sum() / n),
        "other": float((~original & ~near).sum() / n),
    }


def _epsilons(epsilons: Iterable[float]) -> list[float]:
    eps = [check_real("epsilon", e, gt=0) for e in epsilons]
    if not eps:
        raise ValueError("epsilons must not be empty, got epsilons=[].")
    return eps


# ---------------------------------------------------------------------------------------------
# output proportions ([A26] Figures 2, 8, 9)
# ---------------------------------------------------------------------------------------------


def output_proportions(
    vocabulary: Vocabulary,
    *,
    epsilons: Sequence[float],
    mechanisms: Sequence[str] = MECHANISM_NAMES,
    c: float | Sequence[float] = 0.04,
    neighbours: int = 100,
    **sample: Unpack[WordSample],
) -> Table:
    """Share of outputs that are the original word, a close neighbour, or another word.

    Parameters
    ----------
    vocabulary : Vocabulary
    epsilons : sequence of float, > 0
    mechanisms : subset of {"nearest", "rank", "exponential"}
    c : float or sequence of float
        Rank temperature(s) for ``"rank"`` (one row per ``c`` and epsilon).
    neighbours : int
        How many nearest neighbours of the original word count as close (100 in [A26]).
    n_words : int, default 1000
        Random words (ignored when ``words`` is given). ``n_words``, ``words``, ``index`` and
        ``rng`` are the keywords of :class:`WordSample` (``**sample``).
    words : array_like of int, optional
        Vocabulary rows to use instead of a random sample.
    index : NearestNeighbourIndex, optional
        Search index over the vocabulary (default: exact).
    rng : int, numpy.random.Generator or None

    Returns
    -------
    Table
        Columns ``mechanism, epsilon, c, original, neighbours, other, n_words``.

    Notes
    -----
    The nearest-word and rank rows of one epsilon share the same noisy vectors: the rank output
    is a post-processing of the nearest word (as in the mechanism itself).

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((300, 8))
    >>> voc = Vocabulary(words=[f"w{i}" for i in range(300)], vectors=X)
    >>> t = output_proportions(voc, epsilons=[1e4], mechanisms=["nearest"], n_words=50, neighbours=5, rng=0)
    >>> t.rows[0]["original"]
    1.0
    """
    check_keywords("output_proportions", sample, WordSample)
    eps = _epsilons(epsilons)
    mechs = [check_choice("mechanism", m, MECHANISM_NAMES) for m in mechanisms]
    cs = [check_real("c", x, gt=0) for x in ([c] if isinstance(c, int | float) else c)]
    neighbours = check_int("neighbours", neighbours, ge=1, le=len(vocabulary) - 1)
    gen = as_generator(sample.get("rng"))
    ids, index = _sampled(vocabulary, sample, 1000, gen)
    if ids.ndim != 1 or ids.size == 0:
        raise DataError(f"words must be a non-empty 1-D array of rows, got shape {ids.shape}.")
    lists = neighbour_lists(index, ids, neighbours)
    table = Table(columns=["mechanism", "epsilon", "c", *CATEGORIES, "n_words"])

    def add(mech: str, e: float, cval: float | None, out: NDArray[np.int64]) -> None:
        table.rows.append(
            {
                "mechanism": mech,
                "epsilon": e,
                "c": cval,
                **_categorise(out, lists),
                "n_words": ids.size,
            }
        )

    if "nearest" in mechs or "rank" in mechs:
        for row in _nearest_and_rank(vocabulary, index, ids, eps, mechs, cs, gen):
            add(*row)
    if "exponential" in mechs:
        outs = _exponential_outputs(index, ids, eps, gen)
        for e in eps:
            add("exponential", e, None, outs[e])
    return table


def _nearest_and_rank(
    vocabulary: Vocabulary,
    index: NearestNeighbourIndex,
    ids: NDArray[np.int64],
    eps: list[float],
    mechs: list[str],
    cs: list[float],
    gen: np.random.Generator,
) -> Iterator[tuple[str, float, float | None, NDArray[np.int64]]]:
    """(mechanism, epsilon, c, outputs) of the nearest word and the rank fix, one noise draw per
    epsilon shared by both."""
    for e in eps:
        base = WordSanitizer(vocabulary=vocabulary, epsilon=e, index=index)
        xstar = index.nearest(base.noisy_vectors(ids, rng=gen))
        if "nearest" in mechs:
            yield "nearest", e, None, xstar
        if "rank" in mechs:
            # several temperatures: one search for the neighbour lists of x*, shared by all
            shared = (
                neighbour_lists(index, xstar, min(1024, index.size - 1)) if len(cs) > 1 else None
            )
            for cval in cs:
                fix = WordSanitizer(
                    vocabulary=vocabulary, epsilon=e, post="rank", c=cval, index=index
                )
                yield "rank", e, cval, fix.post_process(xstar, rng=gen, lists=shared)


def _exponential_outputs(
    index: NearestNeighbourIndex, ids: NDArray[np.int64], eps: list[float], gen: np.random.Generator
) -> dict[float, NDArray[np.int64]]:
    """The exponential mechanism's output for every word, per epsilon (distances in blocks)."""
    outs = {e: np.empty(ids.size, dtype=np.int64) for e in eps}
    block = 32
    for b0 in range(0, ids.size, block):
        D = np.sqrt(index.distance_rows(index.vectors[ids[b0 : b0 + block]]))
        for e in eps:
            outs[e][b0 : b0 + block] = np.concatenate(sample_exponential(D, e, gen))
    return outs


def rank_fix_shares(
    epsilon: float, c: float, *, vocab_size: int, neighbours: int = 100
) -> dict[str, float]:
    r"""Exact output shares of the rank fix for a word whose nearest word :math:`x^*` is itself.

    With :math:`\lambda = \varepsilon c`, :math:`q = e^{-\lambda}` and ranks ``r < V``:
    original :math:`= P(r = 0)`, neighbours :math:`= P(1 \le r \le K)`, other
    :math:`= P(r > K)`. This is the regime of large epsilon, where the nearest-word mechanism
    returns ``w`` (see :func:`output_proportions`). For :math:`V \to \infty` the neighbour share
    :math:`q - q^{K+1}` is largest at :math:`\lambda = \ln(K+1)/K` (0.046 for ``K = 100``,
    share 0.945), i.e. :math:`c = \ln(K+1)/(K\varepsilon)` for a target epsilon.

    Examples
    --------
    >>> s = rank_fix_shares(20.0, math.log(101) / 100 / 20.0, vocab_size=400_000)
    >>> round(s["neighbours"], 3), round(s["original"], 3)
    (0.945, 0.045)
    """
    lam = check_real("epsilon", epsilon, gt=0) * check_real("c", c, gt=0)
    V = check_int("vocab_size", vocab_size, ge=2)
    K = check_int("neighbours", neighbours, ge=1, le=V - 1)
    total = -math.expm1(-lam * V)
    original = -math.expm1(-lam) / total
    near = (math.exp(-lam) - math.exp(-lam * (K + 1))) / total
    return {"original": original, "neighbours": near, "other": max(0.0, 1.0 - original - near)}


@dataclass(frozen=True)
class RankCalibration:
    """Result of :func:`calibrate_rank_c`: the chosen ``c`` and the proportions behind it."""

    c: float
    table: Table
    score: dict[float, float]

    @classmethod
    def from_table(cls, table: Table) -> RankCalibration:
        """Choose ``c`` from the ``"rank"`` rows of an :func:`output_proportions` table: the
        largest mean share of close-neighbour outputs over its epsilons (ties: the smaller
        share of original words)."""
        rows = [r for r in table.rows if r["mechanism"] == "rank"]
        if not rows:
            raise ValueError("table has no 'rank' rows to calibrate c from.")
        score: dict[float, float] = {}
        orig: dict[float, float] = {}
        for cval in dict.fromkeys(r["c"] for r in rows):
            mine = [r for r in rows if r["c"] == cval]
            score[cval] = float(np.mean([r["neighbours"] for r in mine]))
            orig[cval] = float(np.mean([r["original"] for r in mine]))
        best = max(score, key=lambda k: (score[k], -orig[k]))
        return cls(c=best, table=table, score=score)


def calibrate_rank_c(
    vocabulary: Vocabulary,
    *,
    epsilons: Sequence[float],
    c_grid: Sequence[float] = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16),
    n_words: int = 1000,
    neighbours: int = 100,
    index: NearestNeighbourIndex | None = None,
    rng: Any = None,
) -> RankCalibration:
    """Pick the rank temperature ``c`` for a vocabulary from the output proportions.

    [A26] §7 choose ``c`` by looking at the proportions of original / close-neighbour / other
    outputs of the fixed mechanism across epsilon (``c = 0.04`` for GloVe 300d). This helper
    makes the choice explicit: for every ``c`` of ``c_grid`` it measures those proportions on the
    same random words and noise, and returns the ``c`` with the largest mean share of
    close-neighbour outputs over ``epsilons`` (ties: the smaller share of original words).

    Returns
    -------
    RankCalibration
        ``c``, the full proportions ``table`` and the mean neighbour share per ``c``.

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((400, 6))
    >>> voc = Vocabulary(words=[f"w{i}" for i in range(400)], vectors=X)
    >>> cal = calibrate_rank_c(voc, epsilons=[5.0, 20.0], c_grid=[0.01, 1.0], n_words=100, neighbours=20, rng=0)
    >>> cal.c in (0.01, 1.0)
    True
    """
    if not c_grid:
        raise ValueError("c_grid must not be empty, got c_grid=[].")
    table = output_proportions(
        vocabulary,
        epsilons=epsilons,
        mechanisms=["rank"],
        c=c_grid,
        n_words=n_words,
        neighbours=neighbours,
        index=index,
        rng=rng,
    )
    return RankCalibration.from_table(table)


# ---------------------------------------------------------------------------------------------
# neighbour gaps ([A26] Table 2)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NeighbourGaps:
    r"""Per-word neighbour-gap statistics ([A26] Table 2).

    For a word ``w`` with neighbours :math:`x_1, x_2, \dots` (by distance from ``w``):

    * ``z_w_x1`` :math:`= \|w - x_1\|/2`: the projection of the noise on the direction of
      :math:`x_1` that the noise needs to move ``w`` to :math:`x_1`;
    * ``z_x1_x2`` :math:`= (\|w - x_2\|^2 - \|w - x_1\|^2)/(2\|x_1 - x_2\|)`: the distance from
      ``w`` to the bisecting hyperplane of :math:`x_1` and :math:`x_2` (what the noise needs to
      make :math:`x_2` nearer than :math:`x_1`);
    * ``z_x1_x101``: the same for :math:`x_1` and :math:`x_{101}`.

    The curse of dimensionality in one line: ``z_w_x1`` is much larger than the gaps between
    neighbours, so noise large enough to leave ``w`` hardly ever stops at a close neighbour.
    """

    words: NDArray[np.int64]
    z_w_x1: NDArray[np.float64]
    z_x1_x2: NDArray[np.float64]
    z_x1_x101: NDArray[np.float64]
    far_rank: int = 101

    def summary(self) -> Table:
        """Mean, standard deviation, median and count of each statistic (NaNs -- ties between
        duplicate vectors -- are left out)."""
        t = Table(columns=["statistic", "mean", "sd", "median", "n"])
        for name, vals in (
            ("z_w_x1", self.z_w_x1),
            ("z_x1_x2", self.z_x1_x2),
            (f"z_x1_x{self.far_rank}", self.z_x1_x101),
        ):
            v = vals[np.isfinite(vals)]
            t.rows.append(
                {
                    "statistic": name,
                    "mean": float(v.mean()) if v.size else math.nan,
                    "sd": float(v.std(ddof=1)) if v.size > 1 else math.nan,
                    "median": float(np.median(v)) if v.size else math.nan,
                    "n": int(v.size),
                }
            )
        return t

    def means(self) -> dict[str, float]:
        """Mean of each statistic."""
        return {r["statistic"]: r["mean"] for r in self.summary().rows}


def neighbour_gaps(
    vocabulary: Vocabulary, *, far_rank: int = 101, **sample: Unpack[WordSample]
) -> NeighbourGaps:
    """Measure the [A26] Table 2 statistics on random words of a vocabulary.

    Neighbours are found with the (exact) index; the distances are then recomputed in float64.
    ``sample``: :class:`WordSample` (``n_words`` default 5000, ``words``, ``index``, ``rng``).

    Examples
    --------
    >>> X = np.array([[0.0, 0], [1, 0], [0, 3], [-5, 0], [9, 9]])
    >>> voc = Vocabulary(words=list("abcde"), vectors=X)
    >>> g = neighbour_gaps(voc, words=[0], far_rank=3)
    >>> [round(float(v[0]), 4) for v in (g.z_w_x1, g.z_x1_x2, g.z_x1_x101)]
    [0.5, 1.2649, 2.0]
    """
    check_keywords("neighbour_gaps", sample, WordSample)
    far_rank = check_int("far_rank", far_rank, ge=2, le=len(vocabulary) - 1)
    ids, index = _sampled(vocabulary, sample, 5000, as_generator(sample.get("rng")))
    lists = neighbour_lists(index, ids, far_rank)
    X = vocabulary.vectors.astype(np.float64)
    w, x1, x2, xf = (X[lists[:, j]] for j in (0, 1, 2, far_rank))

    def dist(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(np.linalg.norm(a - b, axis=1), dtype=np.float64)

    d1, d2, df = dist(w, x1), dist(w, x2), dist(w, xf)
    with np.errstate(divide="ignore", invalid="ignore"):
        g12 = (d2**2 - d1**2) / (2.0 * dist(x1, x2))
        g1f = (df**2 - d1**2) / (2.0 * dist(x1, xf))
    return NeighbourGaps(
        words=ids,
        z_w_x1=d1 / 2.0,
        z_x1_x2=np.where(np.isfinite(g12), g12, np.nan),
        z_x1_x101=np.where(np.isfinite(g1f), g1f, np.nan),
        far_rank=far_rank,
    )


# ---------------------------------------------------------------------------------------------
# the noisy dot product at the measured gaps
# ---------------------------------------------------------------------------------------------


def dot_product_summary(
    n: int,
    epsilons: Sequence[float],
    *,
    gaps: dict[str, float] | None = None,
    mc_size: int = 0,
    rng: Any = None,
) -> Table:
    r"""The noisy dot product :math:`Z` per epsilon: variance, and the tail :math:`P(Z > g)` at
    each gap ``g`` (e.g. :meth:`NeighbourGaps.means`) by eq. 11, with the Chernoff bound and,
    when ``mc_size > 0``, a Monte Carlo estimate from the shared Laplace sampler.

    Examples
    --------
    >>> t = dot_product_summary(50, [10.0], gaps={"z_w_x1": 1.0})
    >>> round(t.rows[0]["var_Z"], 4), round(t.rows[0]["P(Z>z_w_x1)"], 4)
    (0.51, 0.0797)
    """
    eps = _epsilons(epsilons)
    gaps = dict(gaps or {})
    mc_size = check_int("mc_size", mc_size, ge=0)
    cols = ["epsilon", "var_Z", "sd_Z"]
    for g in gaps:
        cols += [f"P(Z>{g})", f"bound(Z>{g})"] + ([f"MC(Z>{g})"] if mc_size else [])
    t = Table(columns=cols)
    gen = as_generator(rng)
    for e in eps:
        var = dx_theory.dot_variance(n, e)
        row: dict[str, Any] = {"epsilon": e, "var_Z": var, "sd_Z": math.sqrt(var)}
        draws = dx_theory.sample_dot(n, e, mc_size, rng=gen) if mc_size else None
        for g, val in gaps.items():
            row[f"P(Z>{g})"] = float(dx_theory.dot_sf(val, n, e))
            row[f"bound(Z>{g})"] = float(dx_theory.dot_tail_bound(val, n, e))
            if draws is not None:
                row[f"MC(Z>{g})"] = float((draws > val).mean())
        t.rows.append(row)
    return t


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------


def _figure(width: float, height: float, *, wspace: float, top: float) -> Any:
    require("matplotlib", "report", purpose="plots")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    # fixed margins: a layout engine would measure every text box (slow, for no gain here)
    fig.subplots_adjust(
        left=0.8 / width, right=1 - 0.2 / width, bottom=0.15, top=top, wspace=wspace
    )
    return fig


def plot_proportions(table: Table, path: str | os.PathLike[str], *, title: str = "") -> None:
    """One panel per mechanism (and rank ``c``): output shares against epsilon ([A26] Figs 2, 8, 9)."""
    panels: list[tuple[str, float | None]] = list(
        dict.fromkeys((r["mechanism"], r["c"]) for r in table.rows)
    )
    if not panels:
        raise ValueError("table has no rows to plot.")
    fig = _figure(4.2 * len(panels), 3.6, wspace=0.08, top=0.82)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    styles = {"original": "-", "neighbours": "-o", "other": "--"}
    labels = {"original": "original word", "neighbours": "close neighbours", "other": "other words"}
    for ax, (mech, cval) in zip(axes, panels, strict=True):
        rows = sorted(
            (r for r in table.rows if r["mechanism"] == mech and r["c"] == cval),
            key=lambda r: r["epsilon"],
        )
        eps = [r["epsilon"] for r in rows]
        for cat in CATEGORIES:
            ax.plot(eps, [r[cat] for r in rows], styles[cat], label=labels[cat], markersize=3)
        if eps and max(eps) / min(eps) > 20:
            ax.set_xscale("log")
        name = {
            "nearest": "nearest word",
            "rank": "rank fix",
            "exponential": "exponential (SanText)",
        }[mech]
        ax.set_title(name + (f", c={cval:g}" if cval is not None else ""))
        ax.set_xlabel("epsilon")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("proportion of outputs")
    axes[0].legend(loc="center left", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.savefig(os.fspath(path), dpi=120)


def plot_dot_cdf(
    dims: Sequence[int],
    path: str | os.PathLike[str],
    *,
    epsilon: float = 1.0,
    mc_size: int = 50_000,
    rng: Any = None,
) -> None:
    r""":math:`F_Z` by eq. 11 against Monte Carlo, and the upper tail against the Chernoff bound,
    for each dimension in ``dims``, in units of :math:`\mathrm{sd}(Z)`.

    :math:`\varepsilon Z` has a law that depends on ``n`` only, so in these units the curves do
    not depend on ``epsilon``; the normal law is drawn for reference.
    """
    from scipy import special

    dims = [check_int("n", n, ge=2) for n in dims]
    epsilon = check_real("epsilon", epsilon, gt=0)
    gen = as_generator(rng)
    fig = _figure(9.5, 3.6, wspace=0.3, top=0.9)
    ax1, ax2 = fig.subplots(1, 2)
    s = np.linspace(-4, 4, 81)
    t = np.linspace(0.05, 12, 80)
    for n in dims:
        sd = math.sqrt(dx_theory.dot_variance(n, epsilon))
        (line,) = ax1.plot(s, dx_theory.dot_cdf(s * sd, n, epsilon), label=f"n={n}")
        if mc_size:
            mc = dx_theory.dot_cdf_monte_carlo(s[::4] * sd, n, epsilon, size=mc_size, rng=gen)
            ax1.plot(s[::4], mc, "o", color=line.get_color(), markersize=3)
        ax2.semilogy(
            t, dx_theory.dot_sf(t * sd, n, epsilon), color=line.get_color(), label=f"n={n}"
        )
        ax2.semilogy(t, dx_theory.dot_tail_bound(t * sd, n, epsilon), "--", color=line.get_color())
    ax2.semilogy(t, special.ndtr(-t), ":", color="grey", label="normal")
    ax1.set_title("F_Z: eq. 11 (lines), Monte Carlo (dots)")
    ax1.set_xlabel("z / sd(Z)")
    ax2.set_title("P(Z > t): exact (solid), Chernoff bound (dashed)")
    ax2.set_xlabel("t / sd(Z)")
    ax2.set_ylim(1e-16, 2)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(os.fspath(path), dpi=120)
