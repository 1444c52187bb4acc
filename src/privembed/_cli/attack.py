"""``privembed attack token|fingerprint|averaging|linkage|inversion|attribute`` (thin; logic in
:mod:`privembed.attacks`).

Every command takes its data as one positional INPUT and runs either on files (protected
vectors someone released) or on a mechanism spec (``--mechanism laplace --epsilon 10``: the
command protects the inputs itself, seeded with ``--seed`` or keyed with ``--key-file``),
prints a table and writes JSON with ``-o``.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from ..mechanisms.mahalanobis import DEFAULT_MASK_DELTA
from .common import (
    MechanismName,
    OptDelta,
    OptEpsilon,
    OptMask,
    OptMaskDelta,
    OptSigma,
    OptSmoothing,
    console,
    err_console,
    parse_floats,
    print_json,
    progress_done,
    user_errors,
)
from .options import (
    aux_fraction_flag,
    copies_flag,
    epochs_flag,
    epsilon_flag,
    json_flag,
    lr_flag,
    mechanism_flag,
    model_flag,
    n_flag,
    output_flag,
    overwrite_flag,
    profile_flag,
    release_flag,
    seed_flag,
    sensitive_flag,
    texts_flag,
    train_embeddings_flag,
    train_texts_flag,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

# ---- shared options -------------------------------------------------------------------------

Mechanism = Annotated[
    MechanismName | None,
    mechanism_flag(
        help="Protect internally with this mechanism; omit to attack the given files as they are.",
    ),
]
Seed = Annotated[int | None, seed_flag(help="Seed (data split, noise, training).")]
KeyFile = Annotated[
    Path | None, typer.Option(help="Secret key file: protect with keyed (repeat-safe) noise.")
]
Output = Annotated[Path | None, output_flag(help="Write the results as JSON.")]
AsJson = Annotated[bool, json_flag(help="Print the results as JSON (stdout) instead of tables.")]
Overwrite = Annotated[bool, overwrite_flag(help="Replace an existing --output file.")]
Model = Annotated[str | None, model_flag(help="Embedding model for texts (default: offline).")]
TextsInput = Annotated[
    Path | None,
    typer.Argument(
        help="Texts (JSONL, CSV or Parquet with 'id'/'text', or .txt); default: the built-in "
        "PII corpus.",
        show_default=False,
    ),
]
AlignedEmbeddings = Annotated[
    Path | None,
    typer.Option(help="Embeddings of INPUT's texts, row by row (default: embed them)."),
]
# the attacker's own corpus and training (token, inversion)
TrainTexts = Annotated[
    Path | None, train_texts_flag(help="Attacker's auxiliary texts (default: split --texts).")
]
TrainEmbeddings = Annotated[
    Path | None,
    train_embeddings_flag(help="Embeddings of --train-texts (as the attacker has them)."),
]
Sensitive = Annotated[Path | None, sensitive_flag()]
CorpusSize = Annotated[int, n_flag(help="Notes of the built-in PII corpus (no --texts).")]
AuxFraction = Annotated[float, aux_fraction_flag(help="Share of texts the attacker owns.")]
Baseline = Annotated[
    bool, typer.Option("--baseline/--no-baseline", help="Also attack unprotected vectors.")
]
# the transformer decoder's options (inversion --decoder transformer)
Pretrained = Annotated[
    Path | None,
    typer.Option(
        help="Transformer: a saved attack folder (e.g. from benchmarks/bench_inversion.py "
        "--full, under the user cache) to fine-tune on the auxiliary texts instead of "
        "training from scratch."
    ),
]
Rounds = Annotated[int, typer.Option(help="Transformer: correction rounds at inference (0: none).")]
Candidates = Annotated[
    int, typer.Option(help="Transformer: sentences per round; the closest embedding wins.")
]
SaveAttack = Annotated[
    Path | None, typer.Option(help="Transformer: save the trained attack to this folder.")
]
Device = Annotated[
    str,
    typer.Option(
        help="Transformer: torch device to train and decode on (cpu, cuda, cuda:1); "
        "bfloat16 training on CUDA."
    ),
]
# releases of the same records given as files (fingerprint, averaging)
ReleaseFiles = Annotated[
    list[Path] | None,
    release_flag(help="A release of the same records (repeat, one file per release)."),
]
# earlier spellings of the positional INPUT, kept working (hidden)
OldTexts = Annotated[Path | None, texts_flag()]
OldEmbeddings = Annotated[
    Path | None, typer.Option("--embeddings", hidden=True, help="Deprecated: give INPUT.")
]


def _one_input(given: Path | None, **aliases: Path | None) -> Path | None:
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


def _check_output(output: Path | None, overwrite: bool) -> None:
    """Refuse an existing -o before the (slow) attack runs."""
    if output is not None and output.exists() and not overwrite:
        raise FileExistsError(f"output exists: {output} (pass --overwrite to replace it).")


def _mechanism(
    name: str | None,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    sigma: float | None = None,
    mask: Path | None = None,
    mask_delta: float | None = None,
    smoothing: float | None = None,
) -> Any:
    if name is None:
        given = {"--epsilon": epsilon, "--delta": delta, "--sigma": sigma, "--mask": mask}
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)} need --mechanism.")
        return None
    from ..mechanisms import build_mechanism

    return build_mechanism(
        name,
        epsilon=epsilon,
        delta=delta,
        sigma=sigma,
        mask=mask,
        mask_delta=mask_delta,
        smoothing=smoothing,
    )


def _key(key_file: Path | None, seed: int | None) -> bytes | None:
    if key_file is None:
        return None
    from ..keys.keyed import load_key
    from ..release import check_randomness

    check_randomness(key_file, seed, key_name="--key-file", rng_name="--seed")

    return load_key(key_file)


def _read_embeddings(path: Path) -> tuple[np.ndarray, list[Any] | None]:
    from ..data.io import read_embeddings

    t = read_embeddings(path)
    return np.asarray(t.X, dtype=np.float64), None if t.ids is None else list(t.ids.tolist())


def _encode(texts: list[str], model: str | None) -> np.ndarray:
    from ..data.embedders import Embedder

    with progress_done("embedding", len(texts), unit="texts") as on_progress:
        return np.asarray(Embedder(model).encode(texts, on_progress=on_progress), np.float64)


def _texts_and_embeddings(
    texts: Path, embeddings: Path | None, model: str | None
) -> tuple[list[Any], list[str], np.ndarray]:
    from ..data.io import read_texts

    ids, tx = read_texts(texts)
    if ids is None:  # texts without ids: attack rows are numbered (no keyed noise needed here)
        ids = list(range(len(tx)))
    if embeddings is not None:
        X, _ = _read_embeddings(embeddings)
        if X.shape[0] != len(tx):
            raise ValueError(f"{embeddings} has {X.shape[0]} rows but {texts} has {len(tx)} texts.")
    else:
        err_console.print(f"[dim]- embedding {len(tx)} texts[/dim]", highlight=False)
        X = _encode(tx, model)
    return ids, tx, X


def _pool(data: Path | None, model: str | None) -> tuple[list[Any], np.ndarray]:
    """Embeddings (and ids) of INPUT: an embeddings file, or texts embedded here."""
    from ..data.io import check_input_format, holds_texts

    if data is None:
        raise ValueError("give INPUT: an embeddings file, or texts to embed.")
    check_input_format(data)
    if holds_texts(data):
        text_ids, _tx, T = _texts_and_embeddings(data, None, model)
        return text_ids, T
    X, ids = _read_embeddings(data)
    return ids if ids is not None else list(range(X.shape[0])), X


class _Corpus(NamedTuple):
    """The attacked texts: ids, texts, their embeddings, the sensitive tokens of each text (None:
    every token counts) and the name the tables give the corpus."""

    ids: list[Any]
    texts: list[str]
    X: np.ndarray
    sensitive: list[frozenset[str]] | None
    source: str


def _corpus(
    texts: Path | None,
    embeddings: Path | None,
    model: str | None,
    sensitive: Path | None,
    n: int,
    seed: int | None,
) -> _Corpus:
    """Texts, embeddings and sensitive tokens: from files, or the built-in PII corpus."""
    from ..attacks import pii_corpus
    from ..attacks._common import word_tokens

    if texts is None:
        if embeddings is not None:
            raise ValueError("--embeddings needs the matching texts (INPUT).")
        c = pii_corpus(n, seed=seed or 0)
        err_console.print(f"[dim]- built-in PII corpus: embedding {n} notes[/dim]", highlight=False)
        X = _encode(c.texts, model)
        return _Corpus(c.ids, c.texts, X, c.sensitive, f"built-in PII corpus ({n} notes)")
    ids, tx, X = _texts_and_embeddings(texts, embeddings, model)
    sens = None
    if sensitive is not None:
        from ..concepts import read_tokens

        vocab = {w for t in read_tokens(sensitive) for w in word_tokens(t)}
        sens = [frozenset(set(word_tokens(t)) & vocab) for t in tx]
    return _Corpus(ids, tx, X, sens, str(texts.name))


class _Split(NamedTuple):
    """What a trained attack learns from (the attacker's texts and their embeddings) and what it
    is scored on (the target texts, their clean vectors, ids and sensitive tokens)."""

    aux_texts: list[str]
    aux_X: np.ndarray
    texts: list[str]
    X: np.ndarray
    ids: list[Any]
    sensitive: list[frozenset[str]] | None


def _attacker_split(
    corpus: _Corpus,
    mech: Any,
    *,
    train_texts: Path | None,
    train_embeddings: Path | None,
    model: str | None,
    aux_fraction: float,
    seed: int | None,
) -> _Split:
    """The attacker's own corpus from ``--train-texts``/``--train-embeddings`` (every text of
    the corpus is a target), or a split of the corpus (``--aux-fraction`` to the attacker)."""
    tx, X = corpus.texts, corpus.X
    if train_texts is not None:
        if train_embeddings is None and mech is None:
            raise ValueError("--train-texts needs --train-embeddings when no --mechanism is given.")
        _i, aux_tx, aux_X = _texts_and_embeddings(train_texts, train_embeddings, model)
        tgt = np.arange(len(tx))
    else:
        from ..attacks.base import attacker_split

        aux, tgt = attacker_split(len(tx), aux_fraction, seed)
        aux_tx, aux_X = [tx[i] for i in aux], X[aux]
    sens = None if corpus.sensitive is None else [corpus.sensitive[i] for i in tgt]
    return _Split(aux_tx, aux_X, [tx[i] for i in tgt], X[tgt], [corpus.ids[i] for i in tgt], sens)


def _protect(mech: Any, X: np.ndarray, ids: list[Any], seed: int | None, key: bytes | None) -> Any:
    from ..attacks import simulate_release

    return simulate_release(mech, X, rng=seed, key=key, ids=ids)


def _console(as_json: bool) -> Console:
    """Where tables go: the terminal, or nowhere when the results are printed as JSON."""
    return Console(file=io.StringIO()) if as_json else console


def _write(output: Path | None, obj: dict[str, Any], overwrite: bool, as_json: bool) -> None:
    if as_json:
        print_json(obj)
    if output is None:
        return
    from ..data.io import atomic_output

    with atomic_output(output, overwrite=overwrite) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    err_console.print(f"wrote {output}")


def _f(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}"
    return str(v)


def _describe(mech: Any) -> dict[str, Any] | None:
    if mech is None:
        return None
    return {"config": mech.config, "guarantee": mech.guarantee.describe()}


def _clean_and_protected(
    split: _Split,
    mech: Any,
    key: bytes | None,
    attack: Callable[[], Any],
    *,
    epochs: int,
    baseline: bool,
    seed: int | None,
    label: str,
    **adaptive: Any,
) -> tuple[list[dict[str, Any]], Any]:
    """Train ``attack()`` on the attacker's texts and score it on the targets: without a
    mechanism on the given vectors (the row is named ``label``); with one, on the vectors it
    protects (trained adaptively, with ``adaptive``), after the unprotected vectors when
    ``baseline``. The rows, and the report on clean vectors (None when there is none)."""
    rows: list[dict[str, Any]] = []
    clean = None
    if mech is None or baseline:
        bar = "training" if mech is None else "training (unprotected)"
        with progress_done(bar, epochs, unit="epochs") as on_epoch:
            a0 = attack().fit(split.aux_texts, split.aux_X, rng=seed, on_epoch=on_epoch)
        clean = a0.score(split.texts, split.X, sensitive=split.sensitive)
        rows.append({"target": label if mech is None else "unprotected", **clean.to_dict()})
    if mech is not None:
        Y = _protect(mech, split.X, split.ids, seed, key)
        with progress_done("training (protected)", epochs, unit="epochs") as on_epoch:
            a = attack().fit_adaptive(
                split.aux_texts, split.aux_X, mech, rng=seed, on_epoch=on_epoch, **adaptive
            )
        rep = a.score(split.texts, Y, sensitive=split.sensitive)
        rows.append({"target": repr(mech), **rep.to_dict()})
    return rows, clean


# ---- token ----------------------------------------------------------------------------------


@app.command()
@user_errors
def token(
    input: TextsInput = None,
    embeddings: AlignedEmbeddings = None,
    train_texts: TrainTexts = None,
    train_embeddings: TrainEmbeddings = None,
    sensitive: Sensitive = None,
    n: CorpusSize = 1000,
    mechanism: Mechanism = None,
    epsilon: OptEpsilon = None,
    delta: OptDelta = None,
    sigma: OptSigma = None,
    mask: OptMask = None,
    mask_delta: OptMaskDelta = None,
    smoothing: OptSmoothing = None,
    aux_fraction: AuxFraction = 0.5,
    copies: Annotated[int, copies_flag(help="Protected copies per auxiliary text.")] = 1,
    settings: Annotated[
        Literal["audit", "t26"],
        typer.Option(
            help="Attack settings: audit (one hidden layer of 256, 40 epochs, lr 3e-3, top-10; "
            "measured to beat chance on a few hundred records) or t26 (the paper's: three "
            "layers, 20 epochs, lr 1e-4, p >= 0.5; often too weak to be evidence)."
        ),
    ] = "audit",
    epochs: Annotated[
        int | None, epochs_flag(help="Training epochs (default: from --settings).")
    ] = None,
    lr: Annotated[
        float | None, lr_flag(help="Adam learning rate (default: from --settings).")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Minibatch size.")] = 64,
    min_count: Annotated[int, typer.Option(help="Vocabulary: texts a token must occur in.")] = 2,
    threshold: Annotated[
        float | None, typer.Option(help="Recovered if p >= threshold (replaces top-k).")
    ] = None,
    top_k: Annotated[
        int | None, typer.Option(help="Recovered if among the top-k (default: from --settings).")
    ] = None,
    baseline: Baseline = True,
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    texts: OldTexts = None,
) -> None:
    """Token inference (MLC, [T26] App. I.3): which words do the protected vectors reveal?"""
    from ..attacks import MLCAttack

    texts = _one_input(input, **{"--texts": texts})
    _check_output(output, overwrite)
    out = _console(as_json)
    mech = _mechanism(mechanism, epsilon=epsilon, delta=delta, sigma=sigma, mask=mask,
                      mask_delta=mask_delta, smoothing=smoothing)  # fmt: skip
    key = _key(key_file, seed)
    corpus = _corpus(texts, embeddings, model, sensitive, n, seed)
    split = _attacker_split(
        corpus, mech, train_texts=train_texts, train_embeddings=train_embeddings, model=model,
        aux_fraction=aux_fraction, seed=seed,
    )  # fmt: skip
    chosen = _token_settings(settings, threshold=threshold, top_k=top_k, epochs=epochs, lr=lr)
    rows, clean = _clean_and_protected(
        split, mech, key, lambda: MLCAttack(batch_size=batch_size, min_count=min_count, **chosen),
        epochs=int(chosen["epochs"]), baseline=baseline, seed=seed, n_copies=copies,
        label=str(embeddings.name if embeddings else corpus.source),
    )  # fmt: skip
    weak = _attack_strength(rows, clean)
    _print_token_rows(out, rows, corpus.source, weak=weak)
    _write(
        output,
        {
            "attack": "token",
            "source": corpus.source,
            "mechanism": _describe(mech),
            "n_aux": len(split.aux_texts),
            "n_target": len(split.texts),
            "results": rows,
        },
        overwrite,
        as_json,
    )


def _token_settings(
    settings: str, *, threshold: float | None, top_k: int | None, epochs: int | None,
    lr: float | None,
) -> dict[str, Any]:  # fmt: skip
    """The MLC attack's keyword arguments: the ``--settings`` preset, and the options given."""
    from ..attacks.token_inference import AUDIT_SETTINGS, T26_SETTINGS

    chosen: dict[str, Any] = dict(AUDIT_SETTINGS if settings == "audit" else T26_SETTINGS)
    if threshold is not None and top_k is not None:
        raise ValueError("give --threshold or --top-k, not both.")
    if threshold is not None:
        chosen.update(threshold=threshold, top_k=None)
    if top_k is not None:
        chosen["top_k"] = top_k
    chosen.update({k: v for k, v in (("epochs", epochs), ("lr", lr)) if v is not None})
    return chosen


def _attack_strength(rows: list[dict[str, Any]], clean: Any) -> bool:
    """Mark every row with the attack's strength on clean vectors; True if it is too weak to be
    evidence (it does not beat chance there)."""
    from ..evaluation.privacy import WEAK_ATTACK

    weak = clean is not None and not clean.beats_chance
    for r in rows:
        r["attack_strength"] = (
            "unknown (no unprotected baseline)"
            if clean is None
            else WEAK_ATTACK
            if weak
            else "beats chance"
        )
    return weak


def _print_token_rows(out: Console, rows: list[dict[str, Any]], source: str, *, weak: bool) -> None:
    from ..evaluation.privacy import WEAK_ATTACK

    t = Table(title=f"Token inference (MLC) on {source}; recovered = {rows[-1]['rule']}")
    for col in ("target", "leakage", "chance", "confidence", "AUC (sensitive)", "AUC (all)", "F1"):
        t.add_column(col, justify="left" if col == "target" else "right", overflow="fold")
    for r in rows:
        t.add_row(
            r["target"],
            _f(r["leakage"]),
            _f(r["leakage_chance"]),
            _f(r["confidence"]),
            _f(r["auc_sensitive"]),
            _f(r["auc_all"]),
            _f(r["f1"]),
        )
    out.print(t)
    if weak:
        out.print(
            f"[yellow]note:[/yellow] {WEAK_ATTACK}: on unprotected vectors the attack does not "
            "beat a blind attacker (95% interval of its excess over chance includes 0); try "
            "--settings audit, more texts, or more epochs.",
            highlight=False,
        )


# ---- fingerprint ----------------------------------------------------------------------------


@app.command()
@user_errors
def fingerprint(
    profile: Annotated[
        list[Path],
        profile_flag(help="Candidate concept profile or mask .npy (repeat, one per concept)."),
    ],
    input: Annotated[
        Path | None,
        typer.Argument(
            help="Embeddings or texts to simulate releases on (when no --release is given).",
            show_default=False,
        ),
    ] = None,
    release: ReleaseFiles = None,
    epsilon: Annotated[float, epsilon_flag(help="epsilon of the simulated mechanism.")] = 10.0,
    smoothing: Annotated[float, typer.Option(help="Covariance smoothing lambda.")] = 0.0,
    mask_delta: Annotated[
        float, typer.Option(help="delta added to the masks (the mechanism's default).")
    ] = DEFAULT_MASK_DELTA,
    noise: Annotated[
        Literal["anisotropic", "isotropic", "permuted"],
        typer.Option(help="The defender's noise."),
    ] = "anisotropic",
    releases: Annotated[int, typer.Option(help="Releases per document (N).")] = 10,
    groups: Annotated[int, typer.Option(help="Groups per concept.")] = 50,
    group_size: Annotated[int, typer.Option(help="Documents per group.")] = 30,
    across: Annotated[
        Literal["releases", "documents"],
        typer.Option(help="Variance across releases (eq. 4) or documents (single release)."),
    ] = "releases",
    mlp: Annotated[
        bool, typer.Option("--mlp/--no-mlp", help="Also train the MLP fingerprint classifier.")
    ] = True,
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    texts: OldTexts = None,
    embeddings: OldEmbeddings = None,
) -> None:
    """Variance fingerprint ([F26]): which concept does an anisotropic mechanism protect?"""
    data = _one_input(input, **{"--texts": texts, "--embeddings": embeddings})
    _check_output(output, overwrite)
    out = _console(as_json)
    names, bases, matcher = _concept_templates(
        profile, epsilon=epsilon, mask_delta=mask_delta, smoothing=smoothing
    )
    result: dict[str, Any] = {"attack": "fingerprint", "concepts": names, "across": across}
    if release:
        result |= _match_releases(out, release, names, matcher, across=across, size=group_size)
        _write(output, result, overwrite, as_json)
        return
    key = _key(key_file, seed)
    _ids, X = _pool(data, model)
    sim = {"n_groups": groups, "group_size": group_size, "n_releases": releases, "across": across}
    reports = _simulate_fingerprints(
        X, names, bases, matcher, sim, noise=noise, epsilon=epsilon, smoothing=smoothing,
        mlp=mlp, seed=seed, key=key,
    )  # fmt: skip
    t = Table(
        title=f"Fingerprint attack: {noise} noise, epsilon={epsilon:g}, lambda={smoothing:g}, "
        f"N={releases}, {groups} groups/concept of {group_size}" + (", keyed" if key else "")
    )
    for col in ("attacker", "accuracy", "macro-F1", "chance"):
        t.add_column(col, justify="left" if col == "attacker" else "right")
    for k, r in reports.items():
        t.add_row(k, _f(r["accuracy"]), _f(r["macro_f1"]), _f(r["chance"]))
    out.print(t)
    result.update(
        {
            "noise": noise,
            "epsilon": epsilon,
            "smoothing": smoothing,
            "keyed": key is not None,
            **sim,
            "results": reports,
        }
    )
    _write(output, result, overwrite, as_json)


def _concept_templates(
    profile: list[Path], *, epsilon: float, mask_delta: float, smoothing: float
) -> tuple[list[str], list[np.ndarray], Any]:
    """The candidate concepts (named by their files), the covariance diagonal each one's
    mechanism uses, and the template matcher built from them (smoothed as the attacker
    assumes)."""
    from ..attacks import TemplateMatcher
    from ..mechanisms import MahalanobisMechanism
    from ..mechanisms.mahalanobis import smooth_covariance

    names, bases = [], []
    for p in profile:
        m = MahalanobisMechanism.from_profile(p, epsilon=epsilon, mask_delta=mask_delta)
        names.append(p.stem)
        bases.append(np.asarray(m.covariance_diagonal))
    if len(set(names)) != len(names):
        raise ValueError("profile file names must differ (they name the concepts).")
    assumed = {
        nm: smooth_covariance(b, smoothing) if smoothing > 0 else b
        for nm, b in zip(names, bases, strict=True)
    }
    return names, bases, TemplateMatcher.from_covariances(assumed)


def _match_releases(
    out: Console, release: list[Path], names: list[str], matcher: Any, *, across: str, size: int
) -> dict[str, Any]:
    """Match the variance fingerprints of released files (groups of ``size`` records) to the
    concepts' templates; print the votes and return them with the most likely concept."""
    from ..attacks import variance_fingerprint

    if len(release) < (2 if across == "releases" else 1):
        raise ValueError("the release variance needs at least 2 --release files.")
    R = np.stack([_read_embeddings(p)[0] for p in release])
    n_docs = R.shape[1]
    idx = [np.arange(s, min(s + size, n_docs)) for s in range(0, n_docs, size)]
    idx = [g for g in idx if g.size >= 2] or [np.arange(n_docs)]
    F = variance_fingerprint(R, idx, across=across)
    D = matcher.distances(F)
    pred = matcher.predict(F)
    votes = {nm: pred.count(nm) for nm in names}
    t = Table(title=f"Fingerprint of {len(release)} releases x {n_docs} records")
    t.add_column("concept")
    t.add_column("groups matched", justify="right")
    t.add_column("mean L2 distance to template", justify="right")
    for j, nm in enumerate(names):
        t.add_row(nm, str(votes[nm]), _f(float(D[:, j].mean())))
    out.print(t)
    found = {"groups": len(idx), "votes": votes, "distances": D.mean(axis=0).tolist()}
    found["prediction"] = max(names, key=lambda k: (votes[k], -D[:, names.index(k)].mean()))
    out.print(f"most likely protected concept: [bold]{found['prediction']}[/bold]")
    return found


def _simulate_fingerprints(
    X: np.ndarray,
    names: list[str],
    bases: list[np.ndarray],
    matcher: Any,
    sim: dict[str, Any],
    *,
    noise: str,
    epsilon: float,
    smoothing: float,
    mlp: bool,
    seed: int | None,
    key: bytes | None,
) -> dict[str, Any]:
    """Release half of ``X`` under the defender's ``noise`` for each concept and score the
    template matcher on the fingerprints (and an MLP trained on the other half, as the
    attacker simulates it)."""
    from ..attacks import FingerprintClassifier, permuted_diagonal, simulate_fingerprints
    from ..core.rng import as_generator
    from ..mechanisms import LaplaceMechanism, MahalanobisMechanism

    gen = as_generator(seed)  # under the randomness policy, as every draw
    half = gen.permutation(X.shape[0])
    test_pool, ref_pool = X[np.sort(half[: X.shape[0] // 2])], X[np.sort(half[X.shape[0] // 2 :])]
    defender: dict[str, Any] = {}
    for nm, b in zip(names, bases, strict=True):
        if noise == "isotropic":
            defender[nm] = LaplaceMechanism(epsilon=epsilon)
        elif noise == "permuted":
            defender[nm] = MahalanobisMechanism(
                epsilon=epsilon, covariance=permuted_diagonal(b, gen), smoothing=smoothing
            )
        else:
            defender[nm] = MahalanobisMechanism(epsilon=epsilon, covariance=b, smoothing=smoothing)
    F, y = simulate_fingerprints(defender, test_pool, rng=None if key else gen, key=key, **sim)
    reports = {"template": matcher.score(F, y).to_dict()}
    if mlp:
        assumed_mechs = {
            nm: MahalanobisMechanism(epsilon=epsilon, covariance=b, smoothing=smoothing)
            for nm, b in zip(names, bases, strict=True)
        }
        Fr, yr = simulate_fingerprints(assumed_mechs, ref_pool, rng=gen, **sim)
        clf = FingerprintClassifier().fit(Fr, yr, rng=gen)
        reports["mlp"] = clf.score(F, y).to_dict()
    return reports


# ---- averaging ------------------------------------------------------------------------------


@app.command()
@user_errors
def averaging(
    input: Annotated[
        Path | None,
        typer.Argument(
            help="The originals: embeddings (or texts, with --mechanism). With --mechanism "
            "they are released --releases times; else the --release files are compared to "
            "them, row by row.",
            show_default=False,
        ),
    ] = None,
    release: ReleaseFiles = None,
    mechanism: Mechanism = None,
    epsilon: OptEpsilon = None,
    delta: OptDelta = None,
    sigma: OptSigma = None,
    mask: OptMask = None,
    mask_delta: OptMaskDelta = None,
    smoothing: OptSmoothing = None,
    releases: Annotated[int, typer.Option(help="Largest N (mechanism mode).")] = 32,
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    originals: Annotated[
        Path | None, typer.Option(hidden=True, help="Deprecated: give INPUT.")
    ] = None,
    texts: OldTexts = None,
    embeddings: OldEmbeddings = None,
) -> None:
    """Averaging attack: cosine to the originals of the mean of N releases (fresh vs keyed)."""
    from ..attacks import averaging_attack, release_stack

    data = _one_input(
        input, **{"--originals": originals, "--texts": texts, "--embeddings": embeddings}
    )
    _check_output(output, overwrite)
    out = _console(as_json)
    mech = _mechanism(mechanism, epsilon=epsilon, delta=delta, sigma=sigma, mask=mask,
                      mask_delta=mask_delta, smoothing=smoothing)  # fmt: skip
    reports: dict[str, Any] = {}
    if mech is None:
        if not release or data is None:
            raise ValueError("give the originals (INPUT) and --release files, or a --mechanism.")
        R = np.stack([_read_embeddings(p)[0] for p in release])
        X, _ = _read_embeddings(data)
        reports["files"] = averaging_attack(R, X).to_dict()
    else:
        ids, X = _pool(data, model)
        key = _key(key_file, seed) or secrets.token_bytes(32)
        fresh = release_stack(mech, X, releases, rng=seed)
        keyed = release_stack(mech, X, releases, key=key, ids=ids)
        reports["fresh"] = averaging_attack(fresh, X).to_dict()
        reports["keyed"] = averaging_attack(keyed, X, keyed=True).to_dict()
    t = Table(title="Averaging attack: mean cosine of the average of N releases to the original")
    t.add_column("N", justify="right")
    for k in reports:
        t.add_column(f"{k}", justify="right")
        if reports[k]["expected_cosine"]:
            t.add_column(f"{k} (theory)", justify="right")
    first = next(iter(reports.values()))
    for i, nrel in enumerate(first["n_releases"]):
        cells = [str(nrel)]
        for r in reports.values():
            cells.append(_f(r["mean_cosine"][i]))
            if r["expected_cosine"]:
                cells.append(_f(r["expected_cosine"][i]))
        t.add_row(*cells)
    out.print(t)
    for k, r in reports.items():
        out.print(f"{k}: gain from averaging = {r['gain']:+.4f}")
    _write(
        output,
        {"attack": "averaging", "mechanism": _describe(mech), "results": reports},
        overwrite,
        as_json,
    )


# ---- linkage --------------------------------------------------------------------------------


@app.command()
@user_errors
def linkage(
    input: Annotated[
        Path | None,
        typer.Argument(
            help="The vectors to attack: a protected file (with --candidates), or with "
            "--mechanism clean embeddings or texts, protected here first.",
            show_default=False,
        ),
    ] = None,
    candidates: Annotated[
        Path | None,
        typer.Option(help="Candidate originals: rows with the protected file's ids, or row i."),
    ] = None,
    mechanism: Mechanism = None,
    epsilon: OptEpsilon = None,
    delta: OptDelta = None,
    sigma: OptSigma = None,
    mask: OptMask = None,
    mask_delta: OptMaskDelta = None,
    smoothing: OptSmoothing = None,
    ks: Annotated[
        str, typer.Option("--ks", help="Comma-separated k of the top-k success rates.")
    ] = "1,5,10",
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    protected: Annotated[
        Path | None, typer.Option(hidden=True, help="Deprecated: give INPUT.")
    ] = None,
    texts: OldTexts = None,
    embeddings: OldEmbeddings = None,
) -> None:
    """Re-identification: link protected vectors to a pool of originals (= top-1 retrieval)."""
    from ..attacks import LinkageAttack

    data = _one_input(
        input, **{"--protected": protected, "--texts": texts, "--embeddings": embeddings}
    )
    _check_output(output, overwrite)
    out = _console(as_json)
    atk = LinkageAttack(ks=[int(v) for v in parse_floats("ks", ks)])
    mech = _mechanism(mechanism, epsilon=epsilon, delta=delta, sigma=sigma, mask=mask,
                      mask_delta=mask_delta, smoothing=smoothing)  # fmt: skip
    if mech is None:
        if data is None or candidates is None:
            raise ValueError("give the protected file (INPUT) and --candidates, or a --mechanism.")
        P, pid = _read_embeddings(data)
        C, cid = _read_embeddings(candidates)
        targets = None
        if pid is not None and cid is not None:
            pos = {str(v): i for i, v in enumerate(cid)}
            missing = [v for v in pid if str(v) not in pos]
            if missing:
                raise ValueError(
                    f"{len(missing)} protected ids are not among the candidates (first: {missing[0]!r})."
                )
            targets = [pos[str(v)] for v in pid]
        rep = atk.score(P, C, targets=targets)
        label = str(data.name)
    else:
        ids, X = _pool(data, model)
        Y = _protect(mech, X, ids, seed, _key(key_file, seed))
        rep = atk.score(Y, X)
        label = repr(mech)
    t = Table(
        title=f"Linkage: {rep.n_protected} protected vectors vs {rep.n_candidates} candidates"
    )
    t.add_column("k", justify="right")
    t.add_column("re-identified", justify="right")
    t.add_column("chance", justify="right")
    for kk in rep.top_k:
        t.add_row(str(kk), _f(rep.top_k[kk]), _f(rep.chance[kk]))
    out.print(t)
    out.print(f"mean rank {rep.mean_rank:.4g}, MRR {rep.mrr:.4g} ({label})", highlight=False)
    _write(
        output,
        {"attack": "linkage", "target": label, "mechanism": _describe(mech), **rep.to_dict()},
        overwrite,
        as_json,
    )


# ---- inversion ------------------------------------------------------------------------------


@app.command()
@user_errors
def inversion(
    input: TextsInput = None,
    embeddings: AlignedEmbeddings = None,
    train_texts: TrainTexts = None,
    train_embeddings: TrainEmbeddings = None,
    sensitive: Sensitive = None,
    n: CorpusSize = 1000,
    mechanism: Mechanism = None,
    epsilon: OptEpsilon = None,
    delta: OptDelta = None,
    sigma: OptSigma = None,
    mask: OptMask = None,
    mask_delta: OptMaskDelta = None,
    smoothing: OptSmoothing = None,
    aux_fraction: AuxFraction = 0.5,
    epochs: Annotated[int, epochs_flag(help="Decoder training epochs.")] = 20,
    hidden: Annotated[int, typer.Option(help="GRU state size.")] = 256,
    lr: Annotated[float, lr_flag(help="Adam learning rate.")] = 1e-3,
    beam: Annotated[int, typer.Option(help="Beam width (1 = greedy).")] = 1,
    decoder: Annotated[
        Literal["gru", "transformer"],
        typer.Option(
            help="gru: the word-level GRU decoder; transformer: the soft-prefix transformer "
            "decoder with vec2text-style correction (TransformerInversionAttack)."
        ),
    ] = "gru",
    pretrained: Pretrained = None,
    rounds: Rounds = 1,
    candidates: Candidates = 2,
    save: SaveAttack = None,
    device: Device = "cpu",
    vec2text: Annotated[
        Literal["gtr-base", "text-embedding-ada-002"] | None,
        typer.Option(
            help="Use vec2text's pretrained corrector instead (needs vec2text and the weights "
            "locally)."
        ),
    ] = None,
    baseline: Baseline = True,
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    texts: OldTexts = None,
) -> None:
    """Sentence inversion (GEIA-style decoder trained here, or vec2text): leakage of reconstructions."""
    from ..attacks import GEIAAttack

    texts = _one_input(input, **{"--texts": texts})
    _check_output(output, overwrite)
    _check_decoder(decoder, vec2text, pretrained=pretrained, save=save, device=device,
                   overwrite=overwrite)  # fmt: skip
    out = _console(as_json)
    mech = _mechanism(mechanism, epsilon=epsilon, delta=delta, sigma=sigma, mask=mask,
                      mask_delta=mask_delta, smoothing=smoothing)  # fmt: skip
    key = _key(key_file, seed)
    corpus = _corpus(texts, embeddings, model, sensitive, n, seed)
    summary: dict[str, Any] = {"attack": "inversion"}
    if vec2text is not None:  # (the GRU decoder's place: _check_decoder refuses a transformer)
        rows = [_vec2text_row(vec2text, corpus, mech, seed, key)]
    else:
        split = _attacker_split(
            corpus, mech, train_texts=train_texts, train_embeddings=train_embeddings, model=model,
            aux_fraction=aux_fraction, seed=seed,
        )  # fmt: skip
        if decoder == "transformer":
            summary["decoder"] = "transformer"
            rows = _transformer_inversion(
                split, mech, key, model=model, seed=seed, epochs=epochs, lr=lr,
                pretrained=pretrained, rounds=rounds, candidates=candidates, save=save,
                baseline=baseline, device=device,
            )  # fmt: skip
        else:
            rows, _clean = _clean_and_protected(
                split, mech, key, lambda: GEIAAttack(epochs=epochs, hidden=hidden, lr=lr, beam=beam),
                epochs=epochs, baseline=baseline, seed=seed, label=corpus.source,
            )  # fmt: skip
    if decoder == "transformer":
        _print_transformer_rows(out, rows, corpus.source)
    else:
        _print_inversion_rows(out, rows, corpus.source)
    summary |= {"source": corpus.source, "mechanism": _describe(mech), "results": rows}
    _write(output, summary, overwrite, as_json)


def _check_decoder(
    decoder: str, vec2text: str | None, *, pretrained: Path | None, save: Path | None,
    device: str, overwrite: bool,
) -> None:  # fmt: skip
    """Refuse the options of another decoder, a missing ``--pretrained`` folder, a device that is
    not there and an existing ``--save``: before the corpus is embedded."""
    if decoder != "transformer":
        given = {"--pretrained": pretrained, "--save": save}
        extra = [k for k, v in given.items() if v is not None]
        extra += ["--device"] if device != "cpu" else []
        if extra:
            raise ValueError(f"{', '.join(extra)} need --decoder transformer.")
    elif vec2text is not None:
        raise ValueError("give --vec2text or --decoder transformer, not both.")
    if pretrained is not None and not pretrained.is_dir():
        raise FileNotFoundError(f"--pretrained: no such folder: {pretrained}")
    if decoder == "transformer" and device != "cpu":
        from ..attacks.transformer_inversion import resolve_device

        resolve_device(device)  # a GPU that is not there is refused before any work
    if save is not None and save.exists() and not overwrite:
        raise FileExistsError(f"--save exists: {save} (pass --overwrite to replace it).")


def _vec2text_row(
    name: str, corpus: _Corpus, mech: Any, seed: int | None, key: bytes | None
) -> dict[str, Any]:
    """Score vec2text's pretrained corrector ``name`` on the corpus (protected by ``mech``)."""
    from ..attacks import Vec2TextAdapter

    adapter = Vec2TextAdapter.from_pretrained(name)
    X = corpus.X
    Y = X if mech is None else _protect(mech, X, corpus.ids, seed, key)
    rep = adapter.score(corpus.texts, Y, sensitive=corpus.sensitive)
    return {"target": "vec2text " + name, **rep.to_dict()}


def _print_inversion_rows(out: Console, rows: list[dict[str, Any]], source: str) -> None:
    t = Table(title=f"Sentence inversion on {source}")
    for col in ("target", "leakage", "chance", "word F1", "exact"):
        t.add_column(col, justify="left" if col == "target" else "right", overflow="fold")
    for r in rows:
        t.add_row(
            r["target"],
            _f(r["leakage"]),
            _f(r["leakage_chance"]),
            _f(r["f1"]),
            _f(r["exact_match"]),
        )
    out.print(t)
    for ex in rows[-1]["examples"][:2]:
        out.print(f"  [dim]{ex['text']}[/dim]\n  -> {ex['reconstruction']}", highlight=False)


def _transformer_inversion(
    split: _Split,
    mech: Any,
    key: bytes | None,
    *,
    model: str | None,
    seed: int | None,
    epochs: int,
    lr: float,
    pretrained: Path | None,
    rounds: int,
    candidates: int,
    save: Path | None,
    baseline: bool,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """Train (or fine-tune) the transformer attack on the attacker's texts and score the rest."""
    from ..attacks import TransformerInversionAttack, score_against_blind, score_reconstructions
    from ..attacks.transformer_inversion import strength_verdict
    from ..data.embedders import Embedder

    aux_tx, aux_X = split.aux_texts, split.aux_X
    t_tx, t_sens = split.texts, split.sensitive
    made: list[Any] = []

    def embed(texts: list[str]) -> np.ndarray:  # the embedder loads on first use only
        if not made:
            made.append(Embedder(model))
        return np.asarray(made[0].encode(texts), dtype=np.float64)

    def attack(protect_with: Any) -> Any:
        if pretrained is not None:
            a = TransformerInversionAttack.load(
                pretrained, rounds=rounds, candidates=candidates, device=device
            )
            a.epochs, a.lr = epochs, lr
            a.correction = min(a.correction, len(aux_tx)) if a.has_corrector_ else 0
        else:
            a = TransformerInversionAttack(
                epochs=epochs, lr=lr, rounds=rounds, candidates=candidates,
                correction=min(1000, len(aux_tx)), device=device,
            )  # fmt: skip
        warm = pretrained is not None
        label = "training (protected)" if protect_with is not None else "training"
        steps = epochs * -(-len(aux_tx) // a.batch_size)
        steps += a.correction_epochs * 2 * -(-a.correction // a.batch_size) if a.correction else 0
        with progress_done(label, steps, unit="steps") as on_progress:
            if protect_with is None:
                return a.fit(aux_tx, aux_X, embed=embed, rng=seed, warm_start=warm,
                             on_step=lambda s, _l: on_progress(s))  # fmt: skip
            return a.fit_adaptive(aux_tx, aux_X, protect_with, embed=embed, rng=seed,
                                  warm_start=warm, on_step=lambda s, _l: on_progress(s))  # fmt: skip

    def row(target: str, a: Any, Y: np.ndarray, clean: bool) -> dict[str, Any]:
        with progress_done("reconstructing", len(Y), unit="texts"):  # no count: time elapsed
            recs = a.reconstruct(Y, embed=embed, rng=seed or 0)
        rep = score_against_blind(t_tx, recs, rng=seed or 0)
        leak = score_reconstructions(t_tx, recs, sensitive=t_sens)
        d: dict[str, Any] = {"target": target, **rep.to_dict(), "leakage": leak.leakage}
        if clean:
            d["strength"] = strength_verdict(rep).to_dict()
        return d

    rows: list[dict[str, Any]] = []
    if mech is None:
        a = attack(None)
        rows.append(row("unprotected", a, split.X, True))
    else:
        if baseline:
            a0 = attack(None)
            rows.append(row("unprotected", a0, split.X, True))
        Y = _protect(mech, split.X, split.ids, seed, key)
        a = attack(mech)
        r = row(repr(mech), a, Y, False)
        if rows:
            r["evidence"] = rows[0]["strength"]["verdict"]
        rows.append(r)
    if save is not None:
        a.save(save)
        err_console.print(f"saved the attack to {save}")
    return rows


def _print_transformer_rows(out: Console, rows: list[dict[str, Any]], source: str) -> None:
    t = Table(title=f"Sentence inversion (transformer decoder) on {source}")
    for col in ("target", "BLEU", "blind", "token F1", "blind", "F1 excess 95%", "leakage",
                "verdict"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("target", "verdict") else "right",
                     overflow="fold")  # fmt: skip
    for r in rows:
        lo, hi = r["token_f1_excess_interval"]
        if "strength" in r:
            verdict = r["strength"]["verdict"]
        elif r.get("evidence", "evidence") != "evidence":
            verdict = "no evidence (fails on clean vectors)"
        else:
            verdict = "beats blind" if lo > 0 else "at blind"
        t.add_row(
            r["target"], _f(r["bleu"]), _f(r["bleu_blind"]), _f(r["token_f1"]),
            _f(r["token_f1_blind"]), f"[{_f(lo)}, {_f(hi)}]", _f(r["leakage"]), verdict,
        )  # fmt: skip
    out.print(t)
    for ex in rows[-1]["examples"][:2]:
        out.print(f"  [dim]{ex['text']}[/dim]\n  -> {ex['reconstruction']}", highlight=False)


# ---- attribute ------------------------------------------------------------------------------


@app.command()
@user_errors
def attribute(
    input: Annotated[
        Path | None,
        typer.Argument(
            help="Texts (JSONL, CSV or Parquet with 'id'/'text', or .txt), labelled here.",
            show_default=False,
        ),
    ] = None,
    embeddings: AlignedEmbeddings = None,
    entity: Annotated[
        list[str] | None,
        typer.Option(help="spaCy entity label that makes a text positive (repeat: any of them)."),
    ] = None,
    terms: Annotated[
        Path | None,
        typer.Option(help="Term list (.txt/.json/.jsonl): a text mentioning one is positive."),
    ] = None,
    mechanism: Mechanism = None,
    epsilon: OptEpsilon = None,
    delta: OptDelta = None,
    sigma: OptSigma = None,
    mask: OptMask = None,
    mask_delta: OptMaskDelta = None,
    smoothing: OptSmoothing = None,
    probe: Annotated[
        Literal["linear", "mlp"], typer.Option(help="Logistic regression or an MLP.")
    ] = "linear",
    copies: Annotated[int, copies_flag(help="Protected copies per training text (adaptive).")] = 2,
    test_fraction: Annotated[float, typer.Option(help="Share of texts held out as victims.")] = 0.3,
    seed: Seed = None,
    key_file: KeyFile = None,
    model: Model = None,
    output: Output = None,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
) -> None:
    """Attribute inference: does the text behind a protected vector mention X? (ROC AUC, blind 0.5)"""
    from ..attacks import attribute_audit

    _check_output(output, overwrite)
    if input is None:
        raise ValueError("give INPUT: the texts whose attribute is inferred.")
    if (entity is None) == (terms is None):
        raise ValueError(
            "give the attribute as --entity LABEL (spaCy) or --terms FILE, one of them."
        )
    out = _console(as_json)
    mech = _mechanism(mechanism, epsilon=epsilon, delta=delta, sigma=sigma, mask=mask,
                      mask_delta=mask_delta, smoothing=smoothing)  # fmt: skip
    key = _key(key_file, seed)
    ids, tx, X = _texts_and_embeddings(input, embeddings, model)
    y, what = _attribute_labels(tx, entity, terms)
    from ..attacks.base import attacker_split

    train, test = attacker_split(len(tx), 1.0 - test_fraction, seed)
    for part, name in ((train, "training"), (test, "test")):
        if y[part].all() or not y[part].any():
            raise ValueError(
                f"the {name} texts must hold both classes for {what}: "
                f"{int(y[part].sum())} of {part.size} are positive."
            )
    Y = None if mech is None else _protect(mech, X[test], [ids[i] for i in test], seed, key)
    rows = attribute_audit(
        X[train], y[train], X[test], y[test], protected_test=Y, mechanism=mech, kind=probe,
        n_copies=copies, rng=seed,
    )  # fmt: skip
    _print_attribute_rows(out, rows, f"Attribute inference ({what}, {probe} probe) on {input.name}")
    _write(
        output,
        {
            "attack": "attribute",
            "attribute": what,
            "probe": probe,
            "mechanism": _describe(mech),
            "n_train": int(train.size),
            "n_test": int(test.size),
            "results": [{"target": a, "training": b, **r.to_dict()} for a, b, r in rows],
        },
        overwrite,
        as_json,
    )


def _attribute_labels(
    tx: list[str], entity: list[str] | None, terms: Path | None
) -> tuple[np.ndarray, str]:
    """Which texts hold the attribute (spaCy entities of a label, or a term list), and its name."""
    from ..attacks import mentions, ner_labels

    if entity is not None:
        return ner_labels(tx, entity), "entity " + "|".join(entity)
    from ..concepts import read_tokens

    assert terms is not None
    return mentions(tx, read_tokens(terms)), f"terms of {terms.name}"


def _print_attribute_rows(out: Console, rows: list[tuple[str, str, Any]], title: str) -> None:
    t = Table(title=title)
    for col in ("target", "training", "AUC", "95% interval", "blind", "beats blind"):
        t.add_column(col, justify="left" if col in ("target", "training") else "right")
    for target, training, rep in rows:
        t.add_row(
            target, training, _f(rep.auc), f"[{_f(rep.interval[0])}, {_f(rep.interval[1])}]",
            _f(rep.blind), "yes" if rep.beats_blind else "no",
        )  # fmt: skip
    out.print(t)
    if not rows[0][2].beats_blind:
        out.print("[yellow]the probe does not beat blind on clean vectors: no evidence.[/yellow]")


def register(main: typer.Typer) -> None:
    """Attach the ``attack`` command group to the main app."""
    main.add_typer(app, name="attack", help="Run privacy attacks that audit protected embeddings.")
