"""The one shape of the ``privembed attack`` commands (:mod:`privembed._cli.attack`).

The options every attack takes come in groups, declared once (:class:`~._cli.common.OptionGroup`):
:class:`MechanismSpec` (the mechanism a command protects its inputs with, or none: attack the
given files), :class:`TextCorpus` (the texts of the attacks on texts, and the attacker's share)
and :class:`Run` (seed or key, embedder, ``-o``/``--json``: checked before any work).
:func:`attack_command` turns a function that attacks and returns its JSON results into a
command: groups expanded into options, the deprecated spellings of INPUT, one-line errors, the
results printed or written. :func:`clean_and_protected` is the attack protocol of
:mod:`privembed.attacks.base` for every trained attack: ``fit`` on the attacker's clean texts
and a score on clean targets (the strength check), then ``fit_adaptive`` against the mechanism
and a score on the protected targets.
"""

from __future__ import annotations

import functools
import inspect
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from .common import (
    MechanismName,
    OptDelta,
    OptEpsilon,
    OptionGroup,
    OptMask,
    OptMaskDelta,
    OptSigma,
    OptSmoothing,
    console,
    err_console,
    print_json,
    progress_done,
    user_errors,
    with_option_groups,
)
from .options import (
    aux_fraction_flag,
    json_flag,
    mechanism_flag,
    model_flag,
    n_flag,
    output_flag,
    overwrite_flag,
    release_flag,
    seed_flag,
    sensitive_flag,
    texts_flag,
    train_embeddings_flag,
    train_texts_flag,
)

# ---- the options every attack shares, in groups --------------------------------------------


@dataclass
class MechanismSpec(OptionGroup):
    """The mechanism an attack protects its inputs with (none: attack the given files)."""

    mechanism: Annotated[
        MechanismName | None,
        mechanism_flag(
            help="Protect internally with this mechanism; omit to attack the given files as they "
            "are.",
        ),
    ] = None
    epsilon: OptEpsilon = None
    delta: OptDelta = None
    sigma: OptSigma = None
    mask: OptMask = None
    mask_delta: OptMaskDelta = None
    smoothing: OptSmoothing = None
    #: the mechanism these options build (None without ``--mechanism``)
    mech: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.mechanism is None:
            given = {"--epsilon": self.epsilon, "--delta": self.delta, "--sigma": self.sigma,
                     "--mask": self.mask}  # fmt: skip
            extra = [k for k, v in given.items() if v is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} need --mechanism.")
            return
        from ..mechanisms import build_mechanism

        self.mech = build_mechanism(
            self.mechanism, epsilon=self.epsilon, delta=self.delta, sigma=self.sigma,
            mask=self.mask, mask_delta=self.mask_delta, smoothing=self.smoothing,
        )  # fmt: skip

    def describe(self) -> dict[str, Any] | None:
        """The mechanism as the JSON results give it."""
        if self.mech is None:
            return None
        return {"config": self.mech.config, "guarantee": self.mech.guarantee.describe()}


@dataclass
class Run(OptionGroup):
    """Randomness, the embedder, and where the results go: checked before the attack runs."""

    seed: Annotated[int | None, seed_flag(help="Seed (data split, noise, training).")] = None
    key_file: Annotated[
        Path | None, typer.Option(help="Secret key file: protect with keyed (repeat-safe) noise.")
    ] = None
    model: Annotated[
        str | None, model_flag(help="Embedding model for texts (default: offline).")
    ] = None
    output: Annotated[Path | None, output_flag(help="Write the results as JSON.")] = None
    overwrite: Annotated[bool, overwrite_flag(help="Replace an existing --output file.")] = False
    as_json: Annotated[
        bool, json_flag(help="Print the results as JSON (stdout) instead of tables.")
    ] = False
    #: the secret key of ``--key-file`` (None: fresh noise)
    key: bytes | None = field(init=False, default=None)
    #: where tables go: the terminal, or nowhere when the results are printed as JSON
    out: Console = field(init=False, default=console)

    def __post_init__(self) -> None:
        # refuse an existing -o before the (slow) attack runs
        if self.output is not None and self.output.exists() and not self.overwrite:
            raise FileExistsError(f"output exists: {self.output} (pass --overwrite to replace it).")
        if self.as_json:
            self.out = Console(file=io.StringIO())
        if self.key_file is not None:
            from ..keys.keyed import load_key
            from ..release import check_randomness

            check_randomness(self.key_file, self.seed, key_name="--key-file", rng_name="--seed")
            self.key = load_key(self.key_file)

    def protect(self, mech: Any, X: np.ndarray, ids: list[Any]) -> Any:
        """One release of ``X`` through ``mech``: seeded with ``--seed``, or keyed."""
        from ..attacks import simulate_release

        return simulate_release(mech, X, rng=self.seed, key=self.key, ids=ids)

    def write(self, obj: dict[str, Any]) -> None:
        """The results: printed (``--json``) and written (``-o``)."""
        if self.as_json:
            print_json(obj)
        if self.output is None:
            return
        from ..data.io import atomic_output

        with atomic_output(self.output, overwrite=self.overwrite) as tmp:
            tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
        err_console.print(f"wrote {self.output}")


class Corpus(NamedTuple):
    """The attacked texts: ids, texts, their embeddings, the sensitive tokens of each text (None:
    every token counts) and the name the tables give the corpus."""

    ids: list[Any]
    texts: list[str]
    X: np.ndarray
    sensitive: list[frozenset[str]] | None
    source: str


class Split(NamedTuple):
    """What a trained attack learns from (the attacker's texts and their embeddings) and what it
    is scored on (the target texts, their clean vectors, ids and sensitive tokens)."""

    aux_texts: list[str]
    aux_X: np.ndarray
    texts: list[str]
    X: np.ndarray
    ids: list[Any]
    sensitive: list[frozenset[str]] | None


#: ``--embeddings`` of the texts given as INPUT (token, inversion, attribute)
AlignedEmbeddings = Annotated[
    Path | None,
    typer.Option(help="Embeddings of INPUT's texts, row by row (default: embed them)."),
]


@dataclass
class TextCorpus(OptionGroup):
    """The texts an attack on texts reads (default: the built-in PII corpus), and the
    attacker's own texts (default: a share of them)."""

    input: Annotated[
        Path | None,
        typer.Argument(
            help="Texts (JSONL, CSV or Parquet with 'id'/'text', or .txt); default: the built-in "
            "PII corpus.",
            show_default=False,
        ),
    ] = None
    embeddings: AlignedEmbeddings = None
    train_texts: Annotated[
        Path | None, train_texts_flag(help="Attacker's auxiliary texts (default: split --texts).")
    ] = None
    train_embeddings: Annotated[
        Path | None,
        train_embeddings_flag(help="Embeddings of --train-texts (as the attacker has them)."),
    ] = None
    sensitive: Annotated[Path | None, sensitive_flag()] = None
    n: Annotated[int, n_flag(help="Notes of the built-in PII corpus (no --texts).")] = 1000
    aux_fraction: Annotated[float, aux_fraction_flag(help="Share of texts the attacker owns.")] = (
        0.5
    )

    def read(self, run: Run) -> Corpus:
        """Texts, embeddings and sensitive tokens: from files, or the built-in PII corpus."""
        from ..attacks import pii_corpus
        from ..attacks._common import word_tokens

        if self.input is None:
            if self.embeddings is not None:
                raise ValueError("--embeddings needs the matching texts (INPUT).")
            c = pii_corpus(self.n, seed=run.seed or 0)
            err_console.print(
                f"[dim]- built-in PII corpus: embedding {self.n} notes[/dim]", highlight=False
            )
            X = encode(c.texts, run.model)
            return Corpus(c.ids, c.texts, X, c.sensitive, f"built-in PII corpus ({self.n} notes)")
        ids, tx, X = texts_and_embeddings(self.input, self.embeddings, run.model)
        sens = None
        if self.sensitive is not None:
            from ..concepts import read_tokens

            vocab = {w for t in read_tokens(self.sensitive) for w in word_tokens(t)}
            sens = [frozenset(set(word_tokens(t)) & vocab) for t in tx]
        return Corpus(ids, tx, X, sens, str(self.input.name))

    def split(self, corpus: Corpus, mech: Any, run: Run) -> Split:
        """The attacker's own corpus from ``--train-texts``/``--train-embeddings`` (every text of
        the corpus is a target), or a split of the corpus (``--aux-fraction`` to the
        attacker)."""
        tx, X = corpus.texts, corpus.X
        if self.train_texts is not None:
            if self.train_embeddings is None and mech is None:
                raise ValueError(
                    "--train-texts needs --train-embeddings when no --mechanism is given."
                )
            _i, aux_tx, aux_X = texts_and_embeddings(
                self.train_texts, self.train_embeddings, run.model
            )
            tgt = np.arange(len(tx))
        else:
            from ..attacks.base import attacker_split

            aux, tgt = attacker_split(len(tx), self.aux_fraction, run.seed)
            aux_tx, aux_X = [tx[i] for i in aux], X[aux]
        sens = None if corpus.sensitive is None else [corpus.sensitive[i] for i in tgt]
        ids = [corpus.ids[i] for i in tgt]
        return Split(aux_tx, aux_X, [tx[i] for i in tgt], X[tgt], ids, sens)


Baseline = Annotated[
    bool, typer.Option("--baseline/--no-baseline", help="Also attack unprotected vectors.")
]
# releases of the same records given as files (fingerprint, averaging)
ReleaseFiles = Annotated[
    list[Path] | None,
    release_flag(help="A release of the same records (repeat, one file per release)."),
]


def input_argument(help: str) -> Any:
    """The positional INPUT of a command whose INPUT is not a :class:`TextCorpus`."""
    return typer.Argument(help=help, show_default=False)


@functools.cache
def old_spelling(flag: str) -> inspect.Parameter:
    """A hidden option that names INPUT the way an earlier version did (still parsed)."""
    opt = texts_flag() if flag == "--texts" else typer.Option(flag, hidden=True,
                                                              help="Deprecated: give INPUT.")  # fmt: skip
    return inspect.Parameter(
        flag.lstrip("-"), inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[Path | None, opt],
        default=None,
    )  # fmt: skip


def attack_command(
    app: typer.Typer, *old_spellings: str
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., None]]:
    """Register an attack command on ``app``, named as the decorated function: that function
    takes its own options and the option groups it needs (:class:`MechanismSpec`, :class:`TextCorpus`, :class:`Run`; each shows in
    ``--help`` where it stands), attacks, prints its tables on ``run.out`` and returns the JSON
    results, which ``--json`` prints and ``-o`` writes. ``old_spellings``: hidden options that
    still name INPUT (a note says so)."""

    def register(body: Callable[..., dict[str, Any]]) -> Callable[..., None]:
        @functools.wraps(body)
        def attack_and_write(**values: Any) -> None:
            values["run"].write(body(**values))

        grouped = with_option_groups(attack_and_write)
        olds = [old_spelling(f) for f in old_spellings]

        @functools.wraps(grouped)
        def command(**values: Any) -> None:
            named = {f: values.pop(f.lstrip("-")) for f in old_spellings}
            values["input"] = one_input(values["input"], **named)
            grouped(**values)

        params = [*inspect.signature(grouped).parameters.values(), *olds]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        app.command(body.__name__)(user_errors(command))
        return command

    return register


def one_input(given: Path | None, **aliases: Path | None) -> Path | None:
    """The positional INPUT, or the one deprecated option that names it."""
    named = {k: v for k, v in aliases.items() if v is not None}
    if given is not None and named:
        raise ValueError(
            f"give the input once: as INPUT or with {', '.join(named)} (deprecated), not both."
        )
    if len(named) > 1:
        raise ValueError(f"give one input, got {', '.join(named)}.")
    if named:
        ((opt, path),) = named.items()
        err_console.print(
            f"[yellow]note:[/yellow] {opt} is deprecated: give the file as INPUT "
            f"(privembed attack ... {path}).",
            highlight=False,
        )
        return path
    return given


# ---- reading the inputs ---------------------------------------------------------------------


def read_vectors(path: Path) -> tuple[np.ndarray, list[Any] | None]:
    from ..data.io import read_embeddings

    t = read_embeddings(path)
    return np.asarray(t.X, dtype=np.float64), None if t.ids is None else list(t.ids.tolist())


def read_releases(release: list[Path]) -> np.ndarray:
    """The ``--release`` files, stacked: (releases, records, d)."""
    return np.stack([read_vectors(p)[0] for p in release])


def encode(texts: list[str], model: str | None) -> np.ndarray:
    from ..data.embedders import Embedder

    with progress_done("embedding", len(texts), unit="texts") as on_progress:
        return np.asarray(Embedder(model).encode(texts, on_progress=on_progress), np.float64)


def texts_and_embeddings(
    texts: Path, embeddings: Path | None, model: str | None
) -> tuple[list[Any], list[str], np.ndarray]:
    from ..data.io import read_texts

    ids, tx = read_texts(texts)
    if ids is None:  # texts without ids: attack rows are numbered (no keyed noise needed here)
        ids = list(range(len(tx)))
    if embeddings is not None:
        X, _ = read_vectors(embeddings)
        if X.shape[0] != len(tx):
            raise ValueError(f"{embeddings} has {X.shape[0]} rows but {texts} has {len(tx)} texts.")
    else:
        err_console.print(f"[dim]- embedding {len(tx)} texts[/dim]", highlight=False)
        X = encode(tx, model)
    return ids, tx, X


def pool(data: Path | None, model: str | None) -> tuple[list[Any], np.ndarray]:
    """Embeddings (and ids) of INPUT: an embeddings file, or texts embedded here."""
    from ..data.io import check_input_format, holds_texts

    if data is None:
        raise ValueError("give INPUT: an embeddings file, or texts to embed.")
    check_input_format(data)
    if holds_texts(data):
        text_ids, _tx, T = texts_and_embeddings(data, None, model)
        return text_ids, T
    X, ids = read_vectors(data)
    return ids if ids is not None else list(range(X.shape[0])), X


# ---- the attack protocol of a trained attack ------------------------------------------------


def report_row(attack: Any, split: Split, Y: np.ndarray) -> tuple[dict[str, Any], Any]:
    rep = attack.score(split.texts, Y, sensitive=split.sensitive)
    return rep.to_dict(), rep


@dataclass
class Trained:
    """A trained attack (:class:`privembed.attacks.base.TrainedAttack`) as a command runs it:
    a fresh attack, the progress of one fit, the keywords of ``fit`` (given the progress
    callback) and the extra ones of ``fit_adaptive``, and how a fitted attack scores target
    vectors (the row of the table, and the report)."""

    new: Callable[[], Any]
    steps: Callable[[Any], int]
    unit: str = "epochs"
    fit_kw: Callable[[Callable[[int], None]], dict[str, Any]] = lambda tick: {"on_epoch": tick}
    adaptive_kw: dict[str, Any] = field(default_factory=dict)
    score: Callable[[Any, Split, np.ndarray], tuple[dict[str, Any], Any]] = report_row

    def fit(self, split: Split, mech: Any, seed: int | None, bar: str) -> Any:
        a = self.new()
        with progress_done(bar, self.steps(a), unit=self.unit) as tick:
            if mech is None:
                return a.fit(split.aux_texts, split.aux_X, rng=seed, **self.fit_kw(tick))
            return a.fit_adaptive(split.aux_texts, split.aux_X, mech, rng=seed,
                                  **self.fit_kw(tick), **self.adaptive_kw)  # fmt: skip


def clean_and_protected(
    run: Run, split: Split, mech: Any, trained: Trained, *, baseline: bool, label: str
) -> tuple[list[dict[str, Any]], Any, Any]:
    """Train the attack on the attacker's texts and score it on the targets: without a
    mechanism on the given vectors (the row is named ``label``); with one, on the vectors it
    protects (trained adaptively), after the unprotected vectors when ``baseline``. The rows,
    the report on clean vectors (None when there is none) and the last fitted attack."""
    rows: list[dict[str, Any]] = []
    clean = a = None
    if mech is None or baseline:
        bar = "training" if mech is None else "training (unprotected)"
        a = trained.fit(split, None, run.seed, bar)
        row, clean = trained.score(a, split, split.X)
        rows.append({"target": label if mech is None else "unprotected", **row})
    if mech is not None:
        Y = run.protect(mech, split.X, split.ids)
        a = trained.fit(split, mech, run.seed, "training (protected)")
        row, _rep = trained.score(a, split, Y)
        rows.append({"target": repr(mech), **row})
    return rows, clean, a


# ---- tables ---------------------------------------------------------------------------------


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}"
    return str(v)


def print_table(
    out: Console, title: str, columns: Sequence[str], cells: list[list[str]], *,
    left: Sequence[str] = ("target",), fold: bool = False,
) -> None:  # fmt: skip
    """A table: the ``left`` columns flush left, the numbers flush right."""
    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right",
                     overflow="fold" if fold else "ellipsis")  # fmt: skip
    for row in cells:
        t.add_row(*row)
    out.print(t)


def print_examples(out: Console, rows: list[dict[str, Any]]) -> None:
    for ex in rows[-1]["examples"][:2]:
        out.print(f"  [dim]{ex['text']}[/dim]\n  -> {ex['reconstruction']}", highlight=False)
