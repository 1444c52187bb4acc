"""``privembed attack token|fingerprint|averaging|linkage|inversion|attribute`` (thin; logic in
:mod:`privembed.attacks`).

Every command has one shape (:mod:`privembed._cli._attack_shape`): its data as one positional
INPUT, attacked as given (protected vectors someone released) or protected here first with a
mechanism spec (``--mechanism laplace --epsilon 10``, seeded with ``--seed`` or keyed with
``--key-file``); a table printed, the JSON results written with ``-o`` or printed with
``--json``. A trained attack runs the attack protocol (``clean_and_protected``: fit, score on
clean vectors, fit adaptively, score on protected ones). A new attack is its class in
:mod:`privembed.attacks` and one ``@attack_command(app, ...)`` function below: its own
options, what it prints, and the JSON it returns.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import typer
from rich.console import Console

from ..mechanisms.mahalanobis import DEFAULT_MASK_DELTA
from ._attack_shape import (
    AlignedEmbeddings,
    Baseline,
    Corpus,
    MechanismSpec,
    ReleaseFiles,
    Run,
    Split,
    TextCorpus,
    Trained,
    attack_command,
    clean_and_protected,
    fmt,
    input_argument,
    pool,
    print_examples,
    print_table,
    read_releases,
    read_vectors,
    texts_and_embeddings,
)
from .common import APP_SETTINGS, OptionGroup, err_console, parse_floats, progress_done
from .options import (
    OptCopies,
    OptEpochs,
    OptLr,
    OptTrainBatchSize,
    epochs_flag,
    epsilon_flag,
    lr_flag,
    profile_flag,
)

app = typer.Typer(**APP_SETTINGS)


# ---- token ----------------------------------------------------------------------------------


@attack_command(app, "--texts")
def token(
    *,
    corpus: TextCorpus,
    spec: MechanismSpec,
    copies: OptCopies = 1,
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
    batch_size: OptTrainBatchSize = 64,
    min_count: Annotated[int, typer.Option(help="Vocabulary: texts a token must occur in.")] = 2,
    threshold: Annotated[
        float | None, typer.Option(help="Recovered if p >= threshold (replaces top-k).")
    ] = None,
    top_k: Annotated[
        int | None, typer.Option(help="Recovered if among the top-k (default: from --settings).")
    ] = None,
    baseline: Baseline = True,
    run: Run,
) -> dict[str, Any]:
    """Token inference (MLC, [T26] App. I.3): which words do the protected vectors reveal?"""
    from ..attacks import MLCAttack

    c = corpus.read(run)
    split = corpus.split(c, spec.mech, run)
    chosen = _token_settings(settings, threshold=threshold, top_k=top_k, epochs=epochs, lr=lr)
    trained = Trained(
        new=lambda: MLCAttack(batch_size=batch_size, min_count=min_count, **chosen),
        steps=lambda _a: int(chosen["epochs"]), adaptive_kw={"n_copies": copies},
    )  # fmt: skip
    label = str(corpus.embeddings.name if corpus.embeddings else c.source)
    rows, clean, _a = clean_and_protected(
        run, split, spec.mech, trained, baseline=baseline, label=label
    )
    weak = _attack_strength(rows, clean)
    _print_token_rows(run.out, rows, c.source, weak=weak)
    return {
        "attack": "token",
        "source": c.source,
        "mechanism": spec.describe(),
        "n_aux": len(split.aux_texts),
        "n_target": len(split.texts),
        "results": rows,
    }


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

    keys = ("leakage", "leakage_chance", "confidence", "auc_sensitive", "auc_all", "f1")
    print_table(
        out, f"Token inference (MLC) on {source}; recovered = {rows[-1]['rule']}",
        ("target", "leakage", "chance", "confidence", "AUC (sensitive)", "AUC (all)", "F1"),
        [[r["target"], *(fmt(r[k]) for k in keys)] for r in rows], fold=True,
    )  # fmt: skip
    if weak:
        out.print(
            f"[yellow]note:[/yellow] {WEAK_ATTACK}: on unprotected vectors the attack does not "
            "beat a blind attacker (95% interval of its excess over chance includes 0); try "
            "--settings audit, more texts, or more epochs.",
            highlight=False,
        )


# ---- fingerprint ----------------------------------------------------------------------------


@attack_command(app, "--texts", "--embeddings")
def fingerprint(
    *,
    profile: Annotated[
        list[Path],
        profile_flag(help="Candidate concept profile or mask .npy (repeat, one per concept)."),
    ],
    input: Annotated[
        Path | None,
        input_argument("Embeddings or texts to simulate releases on (when no --release is given)."),
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
    run: Run,
) -> dict[str, Any]:
    """Variance fingerprint ([F26]): which concept does an anisotropic mechanism protect?"""
    names, bases, matcher = _concept_templates(
        profile, epsilon=epsilon, mask_delta=mask_delta, smoothing=smoothing
    )
    result: dict[str, Any] = {"attack": "fingerprint", "concepts": names, "across": across}
    if release:
        return result | _match_releases(run.out, release, names, matcher, across=across,
                                        size=group_size)  # fmt: skip
    _ids, X = pool(input, run.model)
    sim = {"n_groups": groups, "group_size": group_size, "n_releases": releases, "across": across}
    reports = _simulate_fingerprints(
        X, names, bases, matcher, sim, noise=noise, epsilon=epsilon, smoothing=smoothing,
        mlp=mlp, seed=run.seed, key=run.key,
    )  # fmt: skip
    print_table(
        run.out,
        f"Fingerprint attack: {noise} noise, epsilon={epsilon:g}, lambda={smoothing:g}, "
        f"N={releases}, {groups} groups/concept of {group_size}" + (", keyed" if run.key else ""),
        ("attacker", "accuracy", "macro-F1", "chance"),
        [[k, fmt(r["accuracy"]), fmt(r["macro_f1"]), fmt(r["chance"])] for k, r in reports.items()],
        left=("attacker",),
    )  # fmt: skip
    result.update(
        {
            "noise": noise,
            "epsilon": epsilon,
            "smoothing": smoothing,
            "keyed": run.key is not None,
            **sim,
            "results": reports,
        }
    )
    return result


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
    R = read_releases(release)
    n_docs = R.shape[1]
    idx = [np.arange(s, min(s + size, n_docs)) for s in range(0, n_docs, size)]
    idx = [g for g in idx if g.size >= 2] or [np.arange(n_docs)]
    F = variance_fingerprint(R, idx, across=across)
    D = matcher.distances(F)
    pred = matcher.predict(F)
    votes = {nm: pred.count(nm) for nm in names}
    print_table(
        out, f"Fingerprint of {len(release)} releases x {n_docs} records",
        ("concept", "groups matched", "mean L2 distance to template"),
        [[nm, str(votes[nm]), fmt(float(D[:, j].mean()))] for j, nm in enumerate(names)],
        left=("concept",),
    )  # fmt: skip
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


@attack_command(app, "--originals", "--texts", "--embeddings")
def averaging(
    *,
    input: Annotated[
        Path | None,
        input_argument(
            "The originals: embeddings (or texts, with --mechanism). With --mechanism they are "
            "released --releases times; else the --release files are compared to them, row by "
            "row."
        ),
    ] = None,
    release: ReleaseFiles = None,
    spec: MechanismSpec,
    releases: Annotated[int, typer.Option(help="Largest N (mechanism mode).")] = 32,
    run: Run,
) -> dict[str, Any]:
    """Averaging attack: cosine to the originals of the mean of N releases (fresh vs keyed)."""
    from ..attacks import averaging_attack, release_stack

    mech = spec.mech
    reports: dict[str, Any] = {}
    if mech is None:
        if not release or input is None:
            raise ValueError("give the originals (INPUT) and --release files, or a --mechanism.")
        R = read_releases(release)
        X, _ = read_vectors(input)
        reports["files"] = averaging_attack(R, X).to_dict()
    else:
        ids, X = pool(input, run.model)
        key = run.key or secrets.token_bytes(32)
        fresh = release_stack(mech, X, releases, rng=run.seed)
        keyed = release_stack(mech, X, releases, key=key, ids=ids)
        reports["fresh"] = averaging_attack(fresh, X).to_dict()
        reports["keyed"] = averaging_attack(keyed, X, keyed=True).to_dict()
    columns = ["N"]
    for k, r in reports.items():
        columns += [k, f"{k} (theory)"] if r["expected_cosine"] else [k]
    cells = []
    for i, nrel in enumerate(next(iter(reports.values()))["n_releases"]):
        cells.append([str(nrel)])
        for r in reports.values():
            cells[-1].append(fmt(r["mean_cosine"][i]))
            if r["expected_cosine"]:
                cells[-1].append(fmt(r["expected_cosine"][i]))
    print_table(
        run.out, "Averaging attack: mean cosine of the average of N releases to the original",
        columns, cells, left=(),
    )  # fmt: skip
    for k, r in reports.items():
        run.out.print(f"{k}: gain from averaging = {r['gain']:+.4f}")
    return {"attack": "averaging", "mechanism": spec.describe(), "results": reports}


# ---- linkage --------------------------------------------------------------------------------


@attack_command(app, "--protected", "--texts", "--embeddings")
def linkage(
    *,
    input: Annotated[
        Path | None,
        input_argument(
            "The vectors to attack: a protected file (with --candidates), or with --mechanism "
            "clean embeddings or texts, protected here first."
        ),
    ] = None,
    candidates: Annotated[
        Path | None,
        typer.Option(help="Candidate originals: rows with the protected file's ids, or row i."),
    ] = None,
    spec: MechanismSpec,
    ks: Annotated[
        str, typer.Option("--ks", help="Comma-separated k of the top-k success rates.")
    ] = "1,5,10",
    run: Run,
) -> dict[str, Any]:
    """Re-identification: link protected vectors to a pool of originals (= top-1 retrieval)."""
    from ..attacks import LinkageAttack

    atk = LinkageAttack(ks=[int(v) for v in parse_floats("ks", ks)])
    if spec.mech is None:
        if input is None or candidates is None:
            raise ValueError("give the protected file (INPUT) and --candidates, or a --mechanism.")
        P, pid = read_vectors(input)
        C, cid = read_vectors(candidates)
        rep = atk.score(P, C, targets=_aligned(pid, cid))
        label = str(input.name)
    else:
        ids, X = pool(input, run.model)
        rep = atk.score(run.protect(spec.mech, X, ids), X)
        label = repr(spec.mech)
    print_table(
        run.out, f"Linkage: {rep.n_protected} protected vectors vs {rep.n_candidates} candidates",
        ("k", "re-identified", "chance"),
        [[str(kk), fmt(rep.top_k[kk]), fmt(rep.chance[kk])] for kk in rep.top_k], left=(),
    )  # fmt: skip
    run.out.print(f"mean rank {rep.mean_rank:.4g}, MRR {rep.mrr:.4g} ({label})", highlight=False)
    return {"attack": "linkage", "target": label, "mechanism": spec.describe(), **rep.to_dict()}


def _aligned(pid: list[Any] | None, cid: list[Any] | None) -> list[int] | None:
    """The candidate row of each protected row, by id (None: row i is candidate i)."""
    if pid is None or cid is None:
        return None
    pos = {str(v): i for i, v in enumerate(cid)}
    missing = [v for v in pid if str(v) not in pos]
    if missing:
        raise ValueError(
            f"{len(missing)} protected ids are not among the candidates (first: {missing[0]!r})."
        )
    return [pos[str(v)] for v in pid]


# ---- inversion ------------------------------------------------------------------------------


@dataclass
class Decoder(OptionGroup):
    """The decoder that writes the sentences: the GRU, the transformer (and its options), or
    vec2text's pretrained corrector."""

    decoder: Annotated[
        Literal["gru", "transformer"],
        typer.Option(
            help="gru: the word-level GRU decoder; transformer: the soft-prefix transformer "
            "decoder with vec2text-style correction (TransformerInversionAttack)."
        ),
    ] = "gru"
    pretrained: Annotated[
        Path | None,
        typer.Option(
            help="Transformer: a saved attack folder (e.g. from benchmarks/bench_inversion.py "
            "--full, under the user cache) to fine-tune on the auxiliary texts instead of "
            "training from scratch."
        ),
    ] = None
    rounds: Annotated[
        int, typer.Option(help="Transformer: correction rounds at inference (0: none).")
    ] = 1
    candidates: Annotated[
        int, typer.Option(help="Transformer: sentences per round; the closest embedding wins.")
    ] = 2
    save: Annotated[
        Path | None, typer.Option(help="Transformer: save the trained attack to this folder.")
    ] = None
    device: Annotated[
        str,
        typer.Option(
            help="Transformer: torch device to train and decode on (cpu, cuda, cuda:1); "
            "bfloat16 training on CUDA."
        ),
    ] = "cpu"
    vec2text: Annotated[
        Literal["gtr-base", "text-embedding-ada-002"] | None,
        typer.Option(
            help="Use vec2text's pretrained corrector instead (needs vec2text and the weights "
            "locally)."
        ),
    ] = None

    @property
    def is_transformer(self) -> bool:
        return self.decoder == "transformer"

    def check(self, overwrite: bool) -> None:
        """Refuse the options of another decoder, a missing ``--pretrained`` folder, a device
        that is not there and an existing ``--save``: before the corpus is embedded."""
        if self.decoder != "transformer":
            given = {"--pretrained": self.pretrained, "--save": self.save}
            extra = [k for k, v in given.items() if v is not None]
            extra += ["--device"] if self.device != "cpu" else []
            if extra:
                raise ValueError(f"{', '.join(extra)} need --decoder transformer.")
        elif self.vec2text is not None:
            raise ValueError("give --vec2text or --decoder transformer, not both.")
        if self.pretrained is not None and not self.pretrained.is_dir():
            raise FileNotFoundError(f"--pretrained: no such folder: {self.pretrained}")
        if self.decoder == "transformer" and self.device != "cpu":
            from ..attacks.transformer_inversion import resolve_device

            resolve_device(self.device)  # a GPU that is not there is refused before any work
        if self.save is not None and self.save.exists() and not overwrite:
            raise FileExistsError(f"--save exists: {self.save} (pass --overwrite to replace it).")

    def transformer(self, *, epochs: int, lr: float, n_aux: int) -> Any:
        """A fresh transformer attack, or the ``--pretrained`` one to fine-tune (its corrector,
        if it has one, fine-tuned on at most ``n_aux`` texts)."""
        from ..attacks import TransformerInversionAttack

        if self.pretrained is None:
            return TransformerInversionAttack(
                epochs=epochs, lr=lr, rounds=self.rounds, candidates=self.candidates,
                correction=min(1000, n_aux), device=self.device,
            )  # fmt: skip
        a = TransformerInversionAttack.load(
            self.pretrained, rounds=self.rounds, candidates=self.candidates, device=self.device
        )
        a.epochs, a.lr = epochs, lr
        a.correction = min(a.correction, n_aux) if a.has_corrector_ else 0
        return a


@attack_command(app, "--texts")
def inversion(
    *,
    corpus: TextCorpus,
    spec: MechanismSpec,
    epochs: OptEpochs = 20,
    hidden: Annotated[int, typer.Option(help="GRU state size.")] = 256,
    lr: OptLr = 1e-3,
    beam: Annotated[int, typer.Option(help="Beam width (1 = greedy).")] = 1,
    decoder: Decoder,
    baseline: Baseline = True,
    run: Run,
) -> dict[str, Any]:
    """Sentence inversion (GEIA-style decoder trained here, or vec2text): leakage of reconstructions."""
    from ..attacks import GEIAAttack

    decoder.check(run.overwrite)
    mech = spec.mech
    c = corpus.read(run)
    summary: dict[str, Any] = {"attack": "inversion"}
    if decoder.vec2text is not None:  # (the GRU decoder's place: check refuses a transformer)
        rows = [_vec2text_row(decoder.vec2text, c, mech, run)]
    else:
        split = corpus.split(c, mech, run)
        if decoder.is_transformer:
            summary["decoder"] = "transformer"
            rows = _transformer_inversion(
                run, split, mech, decoder, epochs=epochs, lr=lr, baseline=baseline
            )
        else:
            trained = Trained(
                new=lambda: GEIAAttack(epochs=epochs, hidden=hidden, lr=lr, beam=beam),
                steps=lambda _a: epochs,
            )
            rows, _clean, _a = clean_and_protected(
                run, split, mech, trained, baseline=baseline, label=c.source
            )
    if decoder.is_transformer:
        _print_transformer_rows(run.out, rows, c.source)
    else:
        _print_inversion_rows(run.out, rows, c.source)
    return summary | {"source": c.source, "mechanism": spec.describe(), "results": rows}


def _vec2text_row(name: str, corpus: Corpus, mech: Any, run: Run) -> dict[str, Any]:
    """Score vec2text's pretrained corrector ``name`` on the corpus (protected by ``mech``)."""
    from ..attacks import Vec2TextAdapter

    adapter = Vec2TextAdapter.from_pretrained(name)
    X = corpus.X
    Y = X if mech is None else run.protect(mech, X, corpus.ids)
    rep = adapter.score(corpus.texts, Y, sensitive=corpus.sensitive)
    return {"target": "vec2text " + name, **rep.to_dict()}


def _print_inversion_rows(out: Console, rows: list[dict[str, Any]], source: str) -> None:
    keys = ("leakage", "leakage_chance", "f1", "exact_match")
    print_table(
        out, f"Sentence inversion on {source}", ("target", "leakage", "chance", "word F1", "exact"),
        [[r["target"], *(fmt(r[k]) for k in keys)] for r in rows], fold=True,
    )  # fmt: skip
    print_examples(out, rows)


def _transformer_inversion(
    run: Run,
    split: Split,
    mech: Any,
    decoder: Decoder,
    *,
    epochs: int,
    lr: float,
    baseline: bool,
) -> list[dict[str, Any]]:
    """Train (or fine-tune) the transformer attack on the attacker's texts and score the rest:
    each row with its blind pairing; the clean row with the strength check, the protected row
    with whether that check made it evidence."""
    from ..attacks import score_against_blind, score_reconstructions
    from ..attacks.transformer_inversion import strength_verdict
    from ..data.embedders import Embedder

    n_aux, seed = len(split.aux_texts), run.seed
    made: list[Any] = []

    def embed(texts: list[str]) -> np.ndarray:  # the embedder loads on first use only
        if not made:
            made.append(Embedder(run.model))
        return np.asarray(made[0].encode(texts), dtype=np.float64)

    def steps(a: Any) -> int:
        n = epochs * -(-n_aux // a.batch_size)
        return n + (
            a.correction_epochs * 2 * -(-a.correction // a.batch_size) if a.correction else 0
        )

    def score(a: Any, split: Split, Y: np.ndarray) -> tuple[dict[str, Any], Any]:
        with progress_done("reconstructing", len(Y), unit="texts"):  # no count: time elapsed
            recs = a.reconstruct(Y, embed=embed, rng=seed or 0)
        rep = score_against_blind(split.texts, recs, rng=seed or 0)
        leak = score_reconstructions(split.texts, recs, sensitive=split.sensitive)
        return {**rep.to_dict(), "leakage": leak.leakage}, rep

    trained = Trained(
        new=lambda: decoder.transformer(epochs=epochs, lr=lr, n_aux=n_aux), steps=steps,
        unit="steps", score=score,
        fit_kw=lambda tick: {"embed": embed, "warm_start": decoder.pretrained is not None,
                             "on_step": lambda s, _l: tick(s)},
    )  # fmt: skip
    rows, clean, a = clean_and_protected(
        run, split, mech, trained, baseline=baseline, label="unprotected"
    )
    if clean is not None:
        rows[0]["strength"] = strength_verdict(clean).to_dict()
        if len(rows) > 1:
            rows[1]["evidence"] = rows[0]["strength"]["verdict"]
    if decoder.save is not None:
        a.save(decoder.save)
        err_console.print(f"saved the attack to {decoder.save}")
    return rows


def _print_transformer_rows(out: Console, rows: list[dict[str, Any]], source: str) -> None:
    cells = []
    for r in rows:
        lo, hi = r["token_f1_excess_interval"]
        if "strength" in r:
            verdict = r["strength"]["verdict"]
        elif r.get("evidence", "evidence") != "evidence":
            verdict = "no evidence (fails on clean vectors)"
        else:
            verdict = "beats blind" if lo > 0 else "at blind"
        cells.append([
            r["target"], fmt(r["bleu"]), fmt(r["bleu_blind"]), fmt(r["token_f1"]),
            fmt(r["token_f1_blind"]), f"[{fmt(lo)}, {fmt(hi)}]", fmt(r["leakage"]), verdict,
        ])  # fmt: skip
    print_table(
        out, f"Sentence inversion (transformer decoder) on {source}",
        ("target", "BLEU", "blind", "token F1", "blind", "F1 excess 95%", "leakage", "verdict"),
        cells, left=("target", "verdict"), fold=True,
    )  # fmt: skip
    print_examples(out, rows)


# ---- attribute ------------------------------------------------------------------------------


@dataclass
class Attribute(OptionGroup):
    """The attribute inferred: spaCy entities of a label, or the terms of a list."""

    entity: Annotated[
        list[str] | None,
        typer.Option(help="spaCy entity label that makes a text positive (repeat: any of them)."),
    ] = None
    terms: Annotated[
        Path | None,
        typer.Option(help="Term list (.txt/.json/.jsonl): a text mentioning one is positive."),
    ] = None

    def check(self) -> None:
        if (self.entity is None) == (self.terms is None):
            raise ValueError(
                "give the attribute as --entity LABEL (spaCy) or --terms FILE, one of them."
            )

    def labels(self, tx: list[str]) -> tuple[np.ndarray, str]:
        """Which texts hold the attribute, and its name."""
        from ..attacks import mentions, ner_labels

        if self.entity is not None:
            return ner_labels(tx, self.entity), "entity " + "|".join(self.entity)
        from ..concepts import read_tokens

        assert self.terms is not None
        return mentions(tx, read_tokens(self.terms)), f"terms of {self.terms.name}"


@attack_command(app)
def attribute(
    *,
    input: Annotated[
        Path | None,
        input_argument("Texts (JSONL, CSV or Parquet with 'id'/'text', or .txt), labelled here."),
    ] = None,
    embeddings: AlignedEmbeddings = None,
    attribute: Attribute,
    spec: MechanismSpec,
    probe: Annotated[
        Literal["linear", "mlp"], typer.Option(help="Logistic regression or an MLP.")
    ] = "linear",
    copies: OptCopies = 2,
    test_fraction: Annotated[float, typer.Option(help="Share of texts held out as victims.")] = 0.3,
    run: Run,
) -> dict[str, Any]:
    """Attribute inference: does the text behind a protected vector mention X? (ROC AUC, blind 0.5)"""
    from ..attacks import attribute_audit
    from ..attacks.base import attacker_split

    if input is None:
        raise ValueError("give INPUT: the texts whose attribute is inferred.")
    attribute.check()
    mech = spec.mech
    ids, tx, X = texts_and_embeddings(input, embeddings, run.model)
    y, what = attribute.labels(tx)
    train, test = attacker_split(len(tx), 1.0 - test_fraction, run.seed)
    for part, name in ((train, "training"), (test, "test")):
        if y[part].all() or not y[part].any():
            raise ValueError(
                f"the {name} texts must hold both classes for {what}: "
                f"{int(y[part].sum())} of {part.size} are positive."
            )
    Y = None if mech is None else run.protect(mech, X[test], [ids[i] for i in test])
    rows = attribute_audit(
        X[train], y[train], X[test], y[test], protected_test=Y, mechanism=mech, kind=probe,
        n_copies=copies, rng=run.seed,
    )  # fmt: skip
    _print_attribute_rows(
        run.out, rows, f"Attribute inference ({what}, {probe} probe) on {input.name}"
    )
    return {
        "attack": "attribute",
        "attribute": what,
        "probe": probe,
        "mechanism": spec.describe(),
        "n_train": int(train.size),
        "n_test": int(test.size),
        "results": [{"target": a, "training": b, **r.to_dict()} for a, b, r in rows],
    }


def _print_attribute_rows(out: Console, rows: list[tuple[str, str, Any]], title: str) -> None:
    print_table(
        out, title, ("target", "training", "AUC", "95% interval", "blind", "beats blind"),
        [[target, training, fmt(rep.auc), f"[{fmt(rep.interval[0])}, {fmt(rep.interval[1])}]",
          fmt(rep.blind), "yes" if rep.beats_blind else "no"] for target, training, rep in rows],
        left=("target", "training"),
    )  # fmt: skip
    if not rows[0][2].beats_blind:
        out.print("[yellow]the probe does not beat blind on clean vectors: no evidence.[/yellow]")


def register(main: typer.Typer) -> None:
    """Attach the ``attack`` command group to the main app."""
    main.add_typer(app, name="attack", help="Run privacy attacks that audit protected embeddings.")
