"""``privembed concept ...``: learn, inspect and combine concept profiles (thin; logic in
:mod:`privembed.concepts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from .common import APP_SETTINGS, console, err_console, print_json, user_errors
from .options import (
    OptEpochs,
    OptJson,
    OptJsonSummary,
    OptLr,
    OptOverwriteFile,
    OptTrainBatchSize,
    model_flag,
    n_flag,
    output_flag,
    seed_flag,
    texts_flag,
)

app = typer.Typer(**APP_SETTINGS)


def _check_output(output: Path, overwrite: bool) -> None:
    """Refuse a directory, or an existing file without --overwrite, before any work."""
    if output.is_dir():
        raise IsADirectoryError(f"output is a directory: {output}")
    if output.exists() and not overwrite:
        raise FileExistsError(f"output exists: {output} (pass --overwrite to replace it).")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# ---- learn's options --------------------------------------------------------------------------
ConceptName = Annotated[
    str,
    typer.Option(
        "--concept",
        "-c",
        help="Concept name: built in (person, city, country, date, age, disease, symptom, "
        "drug, gender) or your own (then give --tokens, --entity or --pattern).",
    ),
]
Corpus = Annotated[
    Path | None,
    typer.Argument(
        help="Corpus: texts (JSONL, CSV or Parquet with 'text', or .txt). Default for "
        "built-in concepts: generated, seeded sentences.",
        show_default=False,
    ),
]
Tokens = Annotated[
    Path | None,
    typer.Option(help="Concept tokens/phrases: .txt (one per line), .json list or .jsonl."),
]
Entities = Annotated[
    list[str] | None,
    typer.Option(help="spaCy entity label of the concept (repeatable), e.g. PERSON."),
]
Patterns = Annotated[
    list[str] | None, typer.Option(help="Regular expression of the concept (repeatable).")
]
CaseSensitive = Annotated[
    bool | None,
    typer.Option("--case-sensitive/--ignore-case", help="How tokens match (default: concept's)."),
]
Lambda = Annotated[
    float, typer.Option("--lambda", help="Weight of the expected-L0 penalty (eq. 5).")
]
Patience = Annotated[
    int | None, typer.Option(help="Early stopping patience in epochs (off by default).")
]
LearnSeed = Annotated[
    int | None, seed_flag(help="Seed (sentences, split, initialisation, gate noise).")
]
LearnModel = Annotated[
    str | None, model_flag(help="Embedding model (default: offline all-MiniLM-L6-v2).")
]
CacheDir = Annotated[
    Path | None, typer.Option(help="Embedding cache folder (default ~/.cache/privembed).")
]
Force = Annotated[
    bool,
    typer.Option("--force", help="Write the profile even when the learned mask is uninformative."),
]
# the concept eraser fitted beside the profile
Eraser = Annotated[
    bool,
    typer.Option(
        "--eraser",
        help="Also fit a LEACE concept eraser, written beside the profile "
        "(OUTPUT.eraser.npz; protect --erase OUTPUT applies it before noise), and report a "
        "held-out probe's ROC AUC before and after it. Fitted on real text: --eraser-texts, "
        "else INPUT (texts labelled by whether the concept occurs); only without either on "
        "the generated D+/D- pairs (labelled as such: it may erase nothing on real text).",
    ),
]
EraserTexts = Annotated[
    Path | None,
    typer.Option(
        help="Labelled real texts for the eraser (JSONL, CSV or Parquet with 'text'; labels "
        "from --label-field if the file has it, else whether the concept occurs).",
    ),
]
LabelField = Annotated[
    str, typer.Option(help="Field of --eraser-texts holding 0/1 labels (if present).")
]
EraserMethod = Annotated[
    Literal["iterative", "leace"],
    typer.Option(
        help="iterative: remove probe directions until a held-in linear probe on the "
        "released rows is near chance; leace: one LEACE fit (rank 1 for two classes)."
    ),
]


@app.command()
@user_errors
def learn(
    concept: ConceptName,
    output: Annotated[Path, output_flag(help="Profile file to write.")],
    input: Corpus = None,
    tokens: Tokens = None,
    entity: Entities = None,
    pattern: Patterns = None,
    case_sensitive: CaseSensitive = None,
    n: Annotated[int, n_flag(help="Sentences to generate when no --texts is given.")] = 2000,
    epochs: OptEpochs = 100,
    lam: Lambda = 1e-3,
    lr: OptLr = 1e-4,
    batch_size: OptTrainBatchSize = 64,
    val_fraction: Annotated[float, typer.Option(help="Share of pairs held out.")] = 0.1,
    patience: Patience = None,
    threads: Annotated[int, typer.Option(help="torch threads for training.")] = 1,
    seed: LearnSeed = None,
    model: LearnModel = None,
    cache_dir: CacheDir = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not cache embeddings.")] = False,
    as_json: OptJsonSummary = False,
    force: Force = False,
    overwrite: OptOverwriteFile = False,
    eraser: Eraser = False,
    eraser_texts: EraserTexts = None,
    label_field: LabelField = "label",
    eraser_method: EraserMethod = "iterative",
    texts: Annotated[Path | None, texts_flag()] = None,
) -> None:
    """Learn which embedding dimensions carry a concept and save them as a concept profile.

    Fails (exit 2, nothing written) when the learned mask is near-uniform -- nothing was
    learned -- with the numbers and what to try, unless --force.
    """
    from ..concepts import MaskLearner, learn_profile, read_tokens, resolve_concept
    from ..concepts.profile import uninformative_mask

    if input is not None and texts is not None:
        raise ValueError("give the corpus once: as INPUT or with --texts (deprecated).")
    texts = input if input is not None else texts
    _check_output(output, overwrite)
    _check_eraser_options(output, overwrite, eraser=eraser, eraser_texts=eraser_texts)
    learner = MaskLearner(
        epochs=epochs, lam=lam, lr=lr, batch_size=batch_size, val_fraction=val_fraction,
        patience=patience, num_threads=threads,
    )  # fmt: skip
    c = resolve_concept(
        concept,
        tokens=read_tokens(tokens) if tokens is not None else [],
        entity_labels=entity or [],
        patterns=pattern or [],
        case_sensitive=case_sensitive,
    )
    corpus, source = _corpus(concept, texts, n=n, seed=seed)
    err_console.print(f"[dim]- concept {c.name!r}; texts: {source}[/dim]", highlight=False)
    profile = learn_profile(
        corpus, c, model=model, cache_dir=cache_dir, use_cache=not no_cache, rng=seed,
        learner=learner,
    )  # fmt: skip
    profile.metadata["texts_source"] = source
    _print_pairs(profile.metadata["pairs"])
    warning = _step_budget_warning(profile.metadata)
    useless = uninformative_mask(profile)
    if useless and not force:
        raise ValueError(useless + (f" ({warning})" if warning else ""))
    check = None
    if eraser:
        profile.eraser, check = _fit_eraser(
            c, corpus, source, texts, eraser_texts, label_field, model, cache_dir, no_cache, seed,
            eraser_method,
        )  # fmt: skip
    profile.save(output)
    err_console.print(f"wrote {output}", highlight=False)
    if profile.eraser is not None and check is not None:
        _report_eraser(profile.eraser, check, output, eraser_method)
    for line in (useless, warning):
        if line:
            err_console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)
    _show(profile, top=10, as_json=as_json)


def _check_eraser_options(
    output: Path, overwrite: bool, *, eraser: bool, eraser_texts: Path | None
) -> None:
    """Refuse --eraser-texts without --eraser, an eraser file that exists, or eraser texts that
    do not, before any work."""
    if eraser_texts is not None and not eraser:
        raise ValueError("--eraser-texts is the data of the eraser: give --eraser too.")
    if eraser:
        from ..concepts.erasure import eraser_path

        _check_output(eraser_path(output), overwrite)
        if eraser_texts is not None and not eraser_texts.is_file():
            raise FileNotFoundError(f"eraser texts not found: {eraser_texts}")


def _corpus(concept: str, texts: Path | None, *, n: int, seed: int | None) -> tuple[list[str], str]:
    """The texts to learn from and where they came from: the corpus given, else ``n`` generated
    sentences for a built-in concept."""
    from ..concepts.sources import _canonical, generate_sentences
    from ..data.io import read_texts

    if texts is not None:
        _ids, corpus = read_texts(texts)
        return corpus, str(texts.name)
    if _canonical(concept) is not None:
        return generate_sentences(concept, n, rng=seed), f"generated ({n} sentences, seed={seed})"
    raise ValueError(f"concept {concept!r} is not built in; give a corpus of texts (INPUT).")


def _print_pairs(pairs: dict[str, Any]) -> None:
    """How many D+/D- pairs the texts gave (stderr)."""
    err_console.print(
        f"built {pairs['n_pairs']} pairs from {pairs['n_texts']} texts "
        f"({pairs['n_without_concept']} without a concept token, "
        f"{pairs['n_empty_after_removal']} empty after removal)",
        highlight=False,
    )


def _report_eraser(eraser: Any, check: Any, output: Path, method: str) -> None:
    """The eraser written beside the profile, its held-out probe check and its warnings."""
    from ..concepts.erasure import eraser_path

    err_console.print(
        f"wrote {eraser_path(output)} ({method}, rank {eraser.rank}, fitted on "
        f"{check.data}; no privacy guarantee of its own)",
        highlight=False,
    )
    err_console.print(check.describe(), highlight=False)
    for line in check.readable():
        err_console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)
    if check.data.startswith("generated"):
        err_console.print(
            "[yellow]warning:[/yellow] the eraser was fitted on generated sentences; on "
            "real text it may erase nothing a probe reads (docs/concepts.md): fit it on "
            "labelled real text (--eraser-texts, or your corpus as INPUT).",
            highlight=False,
        )


def _fit_eraser(
    concept: Any,
    corpus: list[str],
    source: str,
    texts_path: Path | None,
    eraser_texts: Path | None,
    label_field: str,
    model: str | None,
    cache_dir: Path | None,
    no_cache: bool,
    seed: int | None,
    method: str = "iterative",
) -> Any:
    """The eraser and its held-out check: on --eraser-texts, else on INPUT, else on the
    generated pairs."""
    from ..concepts.erasure import learn_eraser

    common: dict[str, Any] = {
        "model": model, "cache_dir": cache_dir, "use_cache": not no_cache, "rng": seed,
        "method": method,
    }  # fmt: skip
    if eraser_texts is not None:
        from ..data.io import read_text_table

        table = read_text_table(eraser_texts)
        labels = None
        if table.columns is not None and label_field in table.columns.column_names:
            labels = table.columns.column(label_field).to_pylist()
        return learn_eraser(table.texts, concept, labels=labels, source=eraser_texts.name, **common)
    if texts_path is not None:
        return learn_eraser(corpus, concept, source=source, **common)
    return learn_eraser(corpus, concept, pairs=True, source=source, **common)


def _step_budget_warning(meta: dict[str, Any]) -> str | None:
    """Adam moves log alpha by at most ~lr per step; a gate closes only below log(1/11)."""
    import math

    tr = meta.get("training", {})
    n_examples = 2 * int(meta.get("n_train_pairs", 0))
    steps = int(tr.get("epochs", 0)) * math.ceil(n_examples / max(1, int(tr.get("batch_size", 1))))
    budget = float(tr.get("lr", 0.0)) * steps
    if budget >= math.log(11.0):
        return None
    return (
        f"lr x steps = {tr.get('lr')} x {steps} = {budget:.2g}: Adam moves log alpha by at "
        f"most about that much, and a gate closes only after moving {math.log(11.0):.1f}, so no "
        "gate can close and the mask stays near its start (0.5). With this much data, raise "
        "--lr or --epochs."
    )


@app.command()
@user_errors
def show(
    profile: Annotated[Path, typer.Argument(help="A concept profile.")],
    top: Annotated[int, typer.Option(help="How many top dimensions to list.")] = 10,
    as_json: OptJson = False,
) -> None:
    """Sparsity, top dimensions and probe accuracy of a concept profile."""
    from ..concepts import ConceptProfile

    _show(ConceptProfile.load(profile), top=top, as_json=as_json, title=str(profile))


def _show(p: Any, *, top: int, as_json: bool, title: str | None = None) -> None:
    if top < 1:
        raise ValueError(f"top must be >= 1, got top={top}.")
    summary = p.summary()
    summary["top_dimensions"] = p.top_dimensions(min(top, p.dim))
    if as_json:
        print_json(summary)
        return
    t = Table(title=title or "concept profile", show_header=False)
    for key in (
        "concepts",
        "embedding_model",
        "dim",
        "sparsity",
        "n_selected",
        "mask_mean",
        "lambda",
        "n_pairs",
        "val_accuracy_masked",
        "val_accuracy_unmasked",
    ):
        v = summary[key]
        t.add_row(key, ", ".join(v) if isinstance(v, list) else _fmt(v))
    diag = summary.get("sensitivity_diagnostic")
    if diag:
        t.add_row(
            "sensitivity top/bottom 10%",
            f"{diag['top_mean_sensitivity']:.4g} / {diag['bottom_mean_sensitivity']:.4g} "
            f"(Wilcoxon p = {diag['wilcoxon_pvalue']:.3g})",
        )
    if summary.get("combined"):
        t.add_row("combined", f"rule={summary['combined']['rule']}")
    t.add_row(
        f"top {len(summary['top_dimensions'])} dimensions",
        ", ".join(f"{i} ({m:.2f})" for i, m in summary["top_dimensions"]),
    )
    console.print(t)


@app.command()
@user_errors
def combine(
    profiles: Annotated[list[Path], typer.Argument(help="Profiles to combine.")],
    output: Annotated[Path, output_flag(help="Combined profile to write.")],
    rule: Annotated[
        Literal["max", "mean"], typer.Option(help="Element-wise maximum or mean of the masks.")
    ] = "max",
    overwrite: OptOverwriteFile = False,
) -> None:
    """Combine several concept profiles into one (element-wise maximum of the masks)."""
    from ..concepts import ConceptProfile

    _check_output(output, overwrite)
    combined = ConceptProfile.combine([ConceptProfile.load(p) for p in profiles], rule=rule)
    combined.save(output)
    err_console.print(
        f"wrote {output}: {', '.join(combined.concept_names)} "
        f"(rule={rule}, sparsity {combined.sparsity:.3f})",
        highlight=False,
    )


__all__ = ["app", "combine", "learn", "show"]


def register(main: typer.Typer) -> None:
    """Attach the ``concept`` command group to the main app."""
    main.add_typer(
        app,
        name="concept",
        help="Learn and inspect concept profiles (which dimensions carry a concept).",
    )
