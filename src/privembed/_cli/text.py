"""``privembed text ...``: word-level d_X text sanitisation and the analysis of [A26]."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from .common import (
    APP_SETTINGS,
    err_console,
    parse_floats,
    print_json,
    progress_done,
    progress_reported,
    user_errors,
)
from .options import (
    OptJson,
    OptOverwriteFolder,
    OptSeed,
    c_flag,
    epsilon_flag,
    mechanism_flag,
    output_flag,
)

app = typer.Typer(
    help="Word-level text sanitisation with d_X privacy (multivariate Laplace + nearest word, "
    "the rank-based fix, the SanText exponential mechanism) and its analysis ([A26]).",
    **APP_SETTINGS,
)

VectorsOpt = Annotated[
    Path | None,
    typer.Option(
        "--vectors",
        help="Word vectors: a .npy matrix (with --word-list) or a word2vec/GloVe text file. "
        "Default: GloVe 6B 50d (400,000 words).",
    ),
]
WordListOpt = Annotated[
    Path | None,
    typer.Option("--word-list", help="Words of a .npy matrix: one per line, JSON list or Parquet."),
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", help="Keep only the first (most frequent) N words.")
]
IndexOpt = Annotated[
    Literal["exact", "hnsw"],
    typer.Option(
        "--index",
        help="Nearest-word search: exact (FAISS flat) or hnsw (approximate; privacy is unchanged).",
    ),
]
IndexCacheOpt = Annotated[
    Path | None,
    typer.Option("--index-cache", help="HNSW only: file to read the built graph from / save to."),
]


def _vocabulary(vectors: Path | None, word_list: Path | None, limit: int | None) -> Any:
    from ..text import Vocabulary

    return Vocabulary.load(vectors, word_list, limit=limit)


@app.command()
@user_errors
def sanitize(
    text: Annotated[str | None, typer.Argument(help="Text to sanitise (or use --file).")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="A text file: each line is sanitised.")
    ] = None,
    epsilon: Annotated[
        float | None, epsilon_flag(help="Privacy per unit of l2 (required).")
    ] = None,
    post: Annotated[
        Literal["nearest", "rank"],
        typer.Option("--post", help="nearest ([A26] eq. 3) or rank (the [A26] §7 fix)."),
    ] = "nearest",
    c: Annotated[float | None, c_flag(help="Rank temperature for --post rank (e.g. 0.04).")] = None,
    seed: OptSeed = None,
    oov: Annotated[
        Literal["keep", "replace"],
        typer.Option(
            "--oov", help="Out-of-vocabulary words: keep (unprotected) or replace (uniform word)."
        ),
    ] = "keep",
    mechanism: Annotated[
        Literal["laplace", "exponential"],
        mechanism_flag(help="laplace (with --post) or exponential (SanText)."),
    ] = "laplace",
    index: IndexOpt = "exact",
    index_cache: IndexCacheOpt = None,
    vectors: VectorsOpt = None,
    word_list: WordListOpt = None,
    limit: LimitOpt = None,
    as_json: OptJson = False,
) -> None:
    """Sanitise text word by word; punctuation, spacing and capitalisation are kept."""
    from ..data.io import _require_exists
    from ..text import ExponentialSanitizer, NearestNeighbourIndex, WordSanitizer

    if (text is None) == (file is None):
        raise ValueError("give either a TEXT argument or --file, not both or neither.")
    if epsilon is None:
        raise ValueError("--epsilon is required, e.g. --epsilon 10.")
    if file is not None:
        _require_exists(file)
        lines = file.read_text(encoding="utf-8").splitlines()
    else:
        lines = [str(text)]
    voc = _vocabulary(vectors, word_list, limit)
    san: Any
    if mechanism == "exponential":
        if post != "nearest" or c is not None:
            raise ValueError("--post and --c apply to --mechanism laplace only.")
        san = ExponentialSanitizer(vocabulary=voc, epsilon=epsilon, oov=oov)
    else:
        search: Any = index
        if index_cache is not None:
            search = NearestNeighbourIndex(voc.vectors, method=index, cache=index_cache)
        san = WordSanitizer(vocabulary=voc, epsilon=epsilon, post=post, c=c, oov=oov, index=search)
    total = san.count_words(lines) if progress_reported() else 0  # only progress needs it
    with progress_done("sanitising", total, unit="words") as on_progress:
        out = san.sanitize_many(lines, rng=seed, on_progress=on_progress)
    if as_json:
        print_json(
            {
                "mechanism": mechanism,
                "epsilon": epsilon,
                "guarantee": san.guarantee.describe(),
                "texts": [{"text": a, "sanitized": b} for a, b in zip(lines, out, strict=True)],
            }
        )
        return
    err_console.print(f"guarantee: {san.guarantee.describe()}", highlight=False)
    for line in out:
        sys.stdout.write(line + "\n")


@app.command()
@user_errors
def analyze(
    epsilon: Annotated[str, epsilon_flag(help="Comma-separated epsilons.")] = "1,5,10,20,40",
    words: Annotated[int, typer.Option("--words", help="Random words per epsilon.")] = 5000,
    output: Annotated[Path, output_flag(help="Output directory.")] = Path("text-analysis"),
    mechanisms: Annotated[
        str,
        typer.Option("--mechanisms", help="Comma-separated, any of: nearest, rank, exponential."),
    ] = "nearest,rank,exponential",
    c: Annotated[str, c_flag(help="Rank temperature(s), comma-separated.")] = "0.04",
    neighbours: Annotated[
        int, typer.Option("--neighbours", help="Neighbours counted as close (100 in [A26]).")
    ] = 100,
    mc: Annotated[
        int, typer.Option("--mc", help="Monte Carlo draws for the dot-product checks (0: none).")
    ] = 50_000,
    seed: OptSeed = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Write PNG figures.")] = True,
    overwrite: OptOverwriteFolder = False,
    index: IndexOpt = "exact",
    index_cache: IndexCacheOpt = None,
    vectors: VectorsOpt = None,
    word_list: WordListOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Output proportions, neighbour gaps (Table 2) and the noisy dot product, as tables and plots."""
    from ..core._validation import check_choice, check_int, check_real
    from ..core.rng import as_generator
    from ..text import NearestNeighbourIndex, analysis

    # validate everything before the (slow) vocabulary load
    eps = [check_real("epsilon", e, gt=0) for e in parse_floats("epsilon", epsilon)]
    cs = [check_real("c", x, gt=0) for x in parse_floats("c", c)]
    mechs = [
        check_choice("mechanism", m.strip(), analysis.MECHANISM_NAMES)
        for m in mechanisms.split(",")
        if m.strip()
    ]
    words = check_int("words", words, ge=1)
    neighbours = check_int("neighbours", neighbours, ge=1)
    mc = check_int("mc", mc, ge=0)
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"output must be a directory, got an existing file: {output}")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise FileExistsError(
            f"output folder is not empty: {output} (pass --overwrite to replace its files)."
        )
    voc = _vocabulary(vectors, word_list, limit)
    gen = as_generator(seed)
    n_words = min(words, len(voc))
    output.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(table: Any, stem: str) -> None:
        table.to_csv(output / f"{stem}.csv")
        (output / f"{stem}.md").write_text(table.to_markdown() + "\n", encoding="utf-8")
        written.extend([output / f"{stem}.csv", output / f"{stem}.md"])

    err_console.print(f"vocabulary: {voc!r}; building the {index} index", highlight=False)
    idx = NearestNeighbourIndex(voc.vectors, method=index, cache=index_cache)
    err_console.print(f"output proportions: {n_words} words x {len(eps)} epsilons", highlight=False)
    # both analyses draw the same number of words, through the same index and generator
    sample: dict[str, Any] = {"n_words": n_words, "index": idx, "rng": gen}
    props = analysis.output_proportions(
        voc, epsilons=eps, mechanisms=mechs, c=cs, neighbours=neighbours, **sample
    )
    save(props, "proportions")
    err_console.print("neighbour gaps ([A26] Table 2)", highlight=False)
    far = min(101, len(voc) - 1)
    gaps = analysis.neighbour_gaps(voc, far_rank=far, **sample)
    save(gaps.summary(), "neighbour_gaps")
    dots = analysis.dot_product_summary(voc.dim, eps, gaps=gaps.means(), mc_size=mc, rng=gen)
    save(dots, "dot_product")
    if plots:
        analysis.plot_proportions(props, output / "proportions.png", title=voc.name)
        analysis.plot_dot_cdf(
            [voc.dim], output / "dot_cdf.png", epsilon=eps[0], mc_size=mc, rng=gen
        )
        written.extend([output / "proportions.png", output / "dot_cdf.png"])
    for title, table in (
        ("Output proportions", props),
        ("Neighbour gaps", gaps.summary()),
        ("Noisy dot product", dots),
    ):
        sys.stdout.write(f"\n{title}\n\n{table.to_markdown()}\n")
    sys.stdout.write("\nwrote: " + ", ".join(str(p) for p in written) + "\n")


def register(main: typer.Typer) -> None:
    """Attach the ``text`` command group to the main app."""
    main.add_typer(
        app, name="text", help="Word-level text sanitisation (d_X privacy) and its analysis."
    )
