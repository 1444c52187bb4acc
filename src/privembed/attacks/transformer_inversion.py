r"""A transformer decoder that inverts sentence embeddings, with vec2text-style correction.

:class:`TransformerInversionAttack` is the project's strongest *generative* inversion attack:
an attacker who does **not** hold the texts writes a sentence for every protected vector.

Model (GEIA-style, [GEIA]; trained from scratch -- no pretrained language model is reachable
here): the (z-scored) embedding :math:`e` is mapped by a two-layer MLP to ``prefix`` *soft
tokens* that open the sequence of a causal transformer decoder; the decoder then writes the text
token by token (WordPiece pieces of the all-MiniLM-L6-v2 tokenizer, or words).

Iterative correction ([V2T]): after a first hypothesis :math:`\hat t^{(0)}` the attacker embeds
it with the target's embedder, :math:`\hat e = \phi(\hat t)`, and decodes again conditioned on
the target :math:`e`, the hypothesis embedding :math:`\hat e`, their difference
:math:`e - \hat e` (three groups of soft tokens) *and* the hypothesis's tokens. The same network
serves both modes (the correction mode has the extra prefix); it learns the correction mode from
its own hypotheses on the training texts, re-embedded. At inference every round writes
``candidates`` sentences (greedy plus samples); the answer is the candidate, over all rounds,
whose embedding is closest (cosine) to the target -- vec2text's selection rule, which needs only
the public embedder. Against protected vectors the target is the noisy vector: the attacker
compares with what it has.

Adaptive attacker ([T26] App. I.3): :meth:`~TransformerInversionAttack.fit_adaptive` trains on
the attacker's texts with embeddings protected by the mechanism and parameters it attacks, with
*fresh* noise at every epoch (a new protected copy each time the text is seen); with
``warm_start=True`` it fine-tunes a model pretrained on clean vectors (how the experiments use
it: one long pretraining on the public corpus, a short adaptation per mechanism).

Strength check: :meth:`~TransformerInversionAttack.check` scores clean held-out vectors
against the blind pairing (:func:`privembed.attacks.reconstruction.score_against_blind`); only
an attack that clearly beats its blind level on clean vectors is evidence about protected ones,
and the :class:`StrengthCheck` says "no evidence" otherwise.

References
----------
.. [GEIA] Li, Xu, Song (2023). Sentence embedding leaks more information than you expect:
   generative embedding inversion attack to recover the whole sentence. Findings of ACL.
.. [V2T] Morris, Kuleshov, Shmatikov, Rush (2023). Text embeddings reveal (almost) as much as
   text. EMNLP.
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. I.3.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import (
    DataError,
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_real,
    check_training,
)
from ..core.rng import as_generator
from ._common import embeddings_f64, seed_from, standard_scale, torch_module, torch_threads
from ._prefix_decoder import (
    BOS,
    EOS,
    PAD,
    SEP,
    UNK,
    PieceTokenizer,
    _network,
    _Vocab,
    minilm_tokenizer,
)
from .reconstruction import (
    ReconstructionReport,
    StrengthCheck,
    score_against_blind,
    strength_verdict,
)

__all__ = [
    "Embed",
    "PieceTokenizer",
    "StrengthCheck",
    "TransformerInversionAttack",
    "minilm_tokenizer",
    "resolve_device",
]

#: an embedder the attacker can run: texts -> (n, d) array (e.g. ``Embedder().encode``)
Embed = Callable[[list[str]], Any]


# ---------------------------------------------------------------------------------------------
# the attack
# ---------------------------------------------------------------------------------------------


def _check_texts(texts: Any, name: str = "texts") -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a sequence of strings, not a single string.")
    out = list(texts)
    bad = next((i for i, t in enumerate(out) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"{name}[{bad}] must be a str, got {out[bad]!r}.")
    return out


def _unit(X: NDArray[np.float64]) -> NDArray[np.float64]:
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)


def resolve_device(device: str) -> Any:
    """The torch device named ``device``, refused at once where it does not exist (a front end
    calls this before any work)."""
    torch = torch_module()
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device must be a torch device such as 'cuda', got {device!r}.") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} but torch {torch.__version__} sees no CUDA device.")
    return dev


class TransformerInversionAttack:
    """Embedding -> soft-prefix transformer decoder with iterative correction (see the module).

    Parameters
    ----------
    d_model : int, default 256
        Width of the decoder (and of every soft token).
    layers : int, default 4
    heads : int, default 4
        Attention heads (must divide ``d_model``).
    prefix : int, default 8
        Soft tokens per conditioning vector.
    max_len : int, default 40
        Pieces per text (training truncates, decoding stops there).
    tokenizer : {"wordpiece", "word"}, default "wordpiece"
    min_count : int, default 2
        A piece enters the vocabulary if it occurs this often in the training texts.
    max_vocabulary : int, optional
    epochs : int, default 1
        Passes over the training texts in :meth:`fit` (base mode).
    batch_size : int, default 64
    lr : float, default 5e-4
        Peak Adam learning rate (linear warm-up over the first 200 steps, then constant).
    dropout : float, default 0.1
    correction : int, default 4000
        Training texts whose own hypotheses teach the correction mode (0: no correction mode).
        Needs ``embed`` in :meth:`fit`.
    correction_epochs : int, default 2
    rounds : int, default 2
        Correction rounds at inference (0: the first hypothesis only; without ``embed`` no
        correction is possible and the first greedy hypothesis is returned).
    candidates : int, default 3
        Sentences written per round: the greedy one plus ``candidates - 1`` samples
        (temperature ``temperature``); the best by cosine to the target is kept.
    temperature : float, default 0.7
    standardize : bool, default True
        Z-score the conditioning embedding with the training statistics.
    num_threads : int or None, default None
        torch intra-op threads during training and decoding (None: torch's setting).
    device : str, default "cpu"
        torch device for training and decoding (``"cuda"``, ``"cuda:1"``). On a CUDA device the
        training steps run under bfloat16 autocast. Not saved: :meth:`load` puts a model on the
        CPU unless ``device=`` is passed to it.

    Examples
    --------
    >>> texts = ["red cat", "blue dog", "green bird"] * 30
    >>> X = np.repeat(np.eye(3), 1, axis=0)[[0, 1, 2] * 30]
    >>> atk = TransformerInversionAttack(d_model=32, layers=1, heads=2, prefix=2,
    ...     tokenizer="word", min_count=1, epochs=30, lr=3e-3, correction=0, dropout=0.0)
    >>> atk.fit(texts, X, rng=0).reconstruct(np.eye(3))
    ['red cat', 'blue dog', 'green bird']
    """

    def __init__(
        self,
        *,
        d_model: int = 256,
        layers: int = 4,
        heads: int = 4,
        prefix: int = 8,
        max_len: int = 40,
        tokenizer: str = "wordpiece",
        min_count: int = 2,
        max_vocabulary: int | None = None,
        epochs: int = 1,
        batch_size: int = 64,
        lr: float = 5e-4,
        dropout: float = 0.1,
        correction: int = 4000,
        correction_epochs: int = 2,
        rounds: int = 2,
        candidates: int = 3,
        temperature: float = 0.7,
        standardize: bool = True,
        num_threads: int | None = None,
        device: str = "cpu",
    ) -> None:
        self.d_model = check_int("d_model", d_model, ge=2)
        self.layers = check_int("layers", layers, ge=1)
        self.heads = check_int("heads", heads, ge=1)
        if self.d_model % self.heads:
            raise ValueError(
                f"heads must divide d_model, got heads={heads!r} and d_model={d_model!r}."
            )
        self.prefix = check_int("prefix", prefix, ge=1)
        self.max_len = check_int("max_len", max_len, ge=1)
        self.tokenizer = check_choice("tokenizer", tokenizer, PieceTokenizer.KINDS)
        self.min_count = check_int("min_count", min_count, ge=1)
        self.max_vocabulary = check_optional_int("max_vocabulary", max_vocabulary, ge=6)
        self.epochs, self.batch_size, self.lr, self.num_threads = check_training(
            epochs, batch_size, lr, num_threads
        )
        self.dropout = check_real("dropout", dropout, ge=0, lt=1)
        self.correction = check_int("correction", correction, ge=0)
        self.correction_epochs = check_int("correction_epochs", correction_epochs, ge=1)
        self.rounds = check_int("rounds", rounds, ge=0)
        self.candidates = check_int("candidates", candidates, ge=1)
        self.temperature = check_real("temperature", temperature, gt=0)
        self.standardize = check_bool("standardize", standardize)
        if not isinstance(device, str) or not device.strip():
            raise TypeError(f"device must be a torch device name such as 'cuda', got {device!r}.")
        self.device = device
        self._device: Any = None
        self._pieces = PieceTokenizer(self.tokenizer)
        self.vocabulary_: _Vocab | None = None
        self.model_: Any = None
        self.dim_: int | None = None
        self.history_: list[float] = []
        self.correction_history_: list[float] = []
        self.steps_ = 0
        self.has_corrector_ = False
        self._mu = self._sd = self._mu_c = self._sd_c = np.zeros(0)

    def __repr__(self) -> str:
        return (
            f"TransformerInversionAttack(d_model={self.d_model}, layers={self.layers}, "
            f"prefix={self.prefix}, tokenizer={self.tokenizer!r})"
        )

    def get_params(self) -> dict[str, Any]:
        """The constructor's keywords (what :meth:`save` records)."""
        keys = (
            "d_model", "layers", "heads", "prefix", "max_len", "tokenizer", "min_count",
            "max_vocabulary", "epochs", "batch_size", "lr", "dropout", "correction",
            "correction_epochs", "rounds", "candidates", "temperature", "standardize",
            "num_threads", "device",
        )  # fmt: skip
        return {k: getattr(self, k) for k in keys}

    # ---- data ---------------------------------------------------------------------------------

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        assert self.vocabulary_ is not None
        return [self.vocabulary_.ids(p, self.max_len) for p in self._pieces.split_many(texts)]

    @staticmethod
    def _pad(rows: Sequence[Sequence[int]], bos_eos: bool) -> NDArray[np.int64]:
        seqs = [[BOS, *r, EOS] if bos_eos else list(r) for r in rows]
        L = max(1, max((len(s) for s in seqs), default=1))
        out = np.zeros((len(seqs), L), dtype=np.int64)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        return out

    def _z(self, X: NDArray[np.float64]) -> NDArray[np.float32]:
        return ((X - self._mu) / self._sd).astype(np.float32)

    def _zc(self, X: NDArray[np.float64], center: bool = True) -> NDArray[np.float32]:
        return (((X - self._mu_c) if center else X) / self._sd_c).astype(np.float32)

    def _conds(
        self, torch: Any, Y: NDArray[np.float64], H: NDArray[np.float64] | None
    ) -> list[Any]:
        c = [torch.from_numpy(self._z(Y))]
        if H is not None:
            c += [torch.from_numpy(self._zc(H)), torch.from_numpy(self._zc(Y - H, center=False))]
        return [t.to(self._device) for t in c]

    # ---- training -----------------------------------------------------------------------------

    def _new_model(self, torch: Any, d_in: int, gen: np.random.Generator) -> None:
        assert self.vocabulary_ is not None
        positions = 3 * self.prefix + 2 * (self.max_len + 2)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_from(gen))
            self.model_ = _network(torch)(
                d_in, len(self.vocabulary_), self.d_model, self.layers, self.heads, self.prefix,
                positions, self.dropout,
            )  # fmt: skip
        self._device = resolve_device(self.device)
        self.model_.to(self._device)
        self._opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
        self.steps_ = 0
        self._warmup = 1
        self._start = 0

    def _step(self, torch: Any, conds: list[Any], hyp: Any | None, text: Any) -> float:
        for g in self._opt.param_groups:
            g["lr"] = self.lr * min(1.0, (self.steps_ - self._start + 1) / self._warmup)
        # bfloat16 autocast on CUDA (no loss scaling needed); a no-op on the CPU
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self._device.type == "cuda"):
            logits = self.model_(conds, hyp, text[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), text[:, 1:].reshape(-1),
            ignore_index=PAD,
        )  # fmt: skip
        self._opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model_.parameters(), 1.0)
        self._opt.step()
        self.steps_ += 1
        return float(loss.detach())

    def fit(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        embed: Embed | None = None,
        rng: Any = None,
        warm_start: bool = False,
        clean_embeddings: Any = None,
        protect: Callable[[NDArray[np.float64], np.random.Generator], Any] | None = None,
        on_step: Callable[[int, float], None] | None = None,
    ) -> TransformerInversionAttack:
        """Train on the attacker's texts and their embeddings (clean, or as released).

        Parameters
        ----------
        texts : sequence of str, length n
        embeddings : array_like, shape (n, d)
            The conditioning vectors (with ``protect``: the clean vectors it protects).
        embed : callable, optional
            texts -> embeddings (the target's embedder); needed for the correction mode.
        rng : int, Generator or None
        warm_start : bool, default False
            Continue training the fitted network (same vocabulary) instead of a new one.
        clean_embeddings : array_like, shape (n, d), optional
            Clean embeddings of ``texts`` (statistics of the hypothesis embeddings); default
            ``embeddings``.
        protect : callable, optional
            ``(X, generator) -> protected X``: fresh protection of every minibatch (the adaptive
            attacker); see :meth:`fit_adaptive`.
        on_step : callable, optional
            ``on_step(step, loss)`` after every optimiser step (progress, checkpoints).
        """
        texts = _check_texts(texts)
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[0] != len(texts):
            raise DataError(f"embeddings has {X.shape[0]} rows but texts has {len(texts)} entries.")
        C = X if clean_embeddings is None else embeddings_f64(clean_embeddings, "clean_embeddings")
        if C.shape != X.shape:
            raise DataError(f"clean_embeddings has shape {C.shape} but embeddings has {X.shape}.")
        if warm_start and self.model_ is None:
            raise RuntimeError("warm_start=True needs a fitted attack; call fit() first.")
        if warm_start and X.shape[1] != self.dim_:
            raise DataError(
                f"embeddings have dimension {X.shape[1]} but the attack was fitted on {self.dim_}."
            )
        if self.correction and embed is None and not warm_start:
            raise ValueError(
                f"correction={self.correction} needs embed (the target's embedder) to embed the "
                "hypotheses; pass embed=..., or correction=0."
            )
        torch = torch_module()
        gen = as_generator(rng)
        pieces = self._pieces.split_many(texts)
        if not warm_start:
            self.vocabulary_ = _Vocab.build(pieces, self.min_count, self.max_vocabulary)
            self.dim_ = X.shape[1]
            self._mu_c, self._sd_c = standard_scale(C, self.standardize)
        assert self.vocabulary_ is not None
        ids = [self.vocabulary_.ids(p, self.max_len) for p in pieces]
        Y0 = X if protect is None else np.asarray(protect(X, gen), dtype=np.float64)
        self._mu, self._sd = standard_scale(Y0, self.standardize)
        with torch_threads(torch, self.num_threads):
            if not warm_start:
                self._new_model(torch, X.shape[1], gen)
            else:
                self._opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
            # linear warm-up over a tenth of this call's base steps, at most 200
            base_steps = self.epochs * -(-len(texts) // self.batch_size)
            self._warmup = max(1, min(200, base_steps // 10))
            self._start = self.steps_
            self.model_.train()
            self.history_ = self._epochs(torch, ids, X, None, None, self.epochs, gen, protect,
                                         on_step)  # fmt: skip
            self.correction_history_ = []
            if self.correction and embed is not None:
                self._fit_correction(torch, ids, X, protect, embed, gen, on_step)
            self.model_.eval()
        return self

    def _fit_correction(
        self, torch: Any, ids: list[list[int]], X: NDArray[np.float64], protect: Any,
        embed: Embed, gen: np.random.Generator, on_step: Any,
    ) -> None:  # fmt: skip
        """The correction mode: the model's own hypotheses on ``correction`` training texts,
        re-embedded, teach it to decode again from (target, hypothesis embedding, difference,
        hypothesis tokens)."""
        k = min(self.correction, len(ids))
        sel = np.sort(gen.choice(len(ids), size=k, replace=False))
        Ys = X[sel] if protect is None else np.asarray(protect(X[sel], gen), np.float64)
        self.model_.eval()
        hyps = self._generate(torch, Ys, None, None, greedy=True, gen=gen)
        H = embeddings_f64(embed(self._texts(hyps)), "embed(texts)")
        if H.shape != Ys.shape:
            raise DataError(
                f"embed returned shape {H.shape} for {k} texts; the attack conditions on "
                f"{Ys.shape[1]}-d vectors (use the target's embedder)."
            )
        self.model_.train()
        self.correction_history_ = self._epochs(
            torch, [ids[i] for i in sel], Ys, H, hyps, self.correction_epochs, gen, None,
            on_step, mixed=(ids, X, protect),
        )  # fmt: skip
        self.has_corrector_ = True
        self.model_.eval()

    def fit_corrector(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        embed: Embed,
        mechanism: Any = None,
        rng: Any = None,
        on_step: Callable[[int, float], None] | None = None,
    ) -> TransformerInversionAttack:
        """Train only the correction mode of a fitted attack (``correction`` texts of these).

        With ``mechanism`` the hypotheses are decoded from protected vectors (the adaptive
        attacker's corrector). Base-mode batches are interleaved, as in :meth:`fit`.
        """
        if self.model_ is None or self.vocabulary_ is None:
            raise RuntimeError("fit_corrector needs a fitted attack; call fit() first.")
        if self.correction < 1:
            raise ValueError(f"correction must be >= 1 here, got correction={self.correction!r}.")
        texts = _check_texts(texts)
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[0] != len(texts):
            raise DataError(f"embeddings has {X.shape[0]} rows but texts has {len(texts)} entries.")
        if X.shape[1] != self.dim_:
            raise DataError(
                f"embeddings have dimension {X.shape[1]} but the attack was fitted on {self.dim_}."
            )
        protect = None
        if mechanism is not None:

            def protect(Xb: NDArray[np.float64], g: np.random.Generator) -> Any:
                return mechanism.privatize(Xb, rng=g)

        torch = torch_module()
        gen = as_generator(rng)
        ids = self._encode(texts)
        with torch_threads(torch, self.num_threads):
            self._opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
            self._start, self._warmup = self.steps_, 1
            self._fit_correction(torch, ids, X, protect, embed, gen, on_step)
        return self

    def _epochs(
        self, torch: Any, ids: list[list[int]], X: NDArray[np.float64],
        H: NDArray[np.float64] | None, hyps: list[list[int]] | None, epochs: int,
        gen: np.random.Generator, protect: Any, on_step: Any, mixed: Any = None,
    ) -> list[float]:  # fmt: skip
        """Minibatch epochs; in correction mode (``H`` given) every step also takes one base
        batch from ``mixed`` so the base mode is not forgotten."""
        n = len(ids)
        history = []
        for _ in range(epochs):
            order = gen.permutation(n)
            total, count = 0.0, 0
            for s in range(0, n, self.batch_size):
                idx = order[s : s + self.batch_size]
                text = torch.from_numpy(self._pad([ids[i] for i in idx], True)).to(self._device)
                if H is None:
                    Y = X[idx] if protect is None else np.asarray(protect(X[idx], gen), np.float64)
                    loss = self._step(torch, self._conds(torch, Y, None), None, text)
                else:
                    assert hyps is not None
                    hyp = torch.from_numpy(self._pad([hyps[i] for i in idx], False)).to(
                        self._device
                    )
                    loss = self._step(torch, self._conds(torch, X[idx], H[idx]), hyp, text)
                    b_ids, b_X, b_prot = mixed
                    j = gen.integers(0, len(b_ids), size=len(idx))
                    Yb = b_X[j] if b_prot is None else np.asarray(b_prot(b_X[j], gen), np.float64)
                    tb = torch.from_numpy(self._pad([b_ids[i] for i in j], True)).to(self._device)
                    self._step(torch, self._conds(torch, Yb, None), None, tb)
                total += loss * len(idx)
                count += len(idx)
                if on_step is not None:
                    on_step(self.steps_, loss)
            history.append(total / max(count, 1))
        return history

    def fit_adaptive(
        self,
        texts: Sequence[str],
        embeddings: Any,
        mechanism: Any,
        *,
        embed: Embed | None = None,
        rng: Any = None,
        warm_start: bool = False,
        on_step: Callable[[int, float], None] | None = None,
    ) -> TransformerInversionAttack:
        """Train on ``embeddings`` protected by ``mechanism``, fresh noise at every step.

        ``embeddings`` are the attacker's *clean* vectors of its own texts; every minibatch is
        protected anew with ``mechanism.privatize`` (seeded from ``rng``), so each epoch sees a
        new protected copy. ``warm_start=True`` fine-tunes a model fitted before (e.g. on clean
        vectors of a large public corpus).
        """
        if not callable(getattr(mechanism, "privatize", None)):
            raise TypeError(
                f"mechanism must have a privatize(X, rng=...) method, got {type(mechanism).__name__}."
            )

        def protect(Xb: NDArray[np.float64], g: np.random.Generator) -> Any:
            return mechanism.privatize(Xb, rng=g)

        return self.fit(
            texts, embeddings, embed=embed, rng=rng, warm_start=warm_start,
            clean_embeddings=embeddings, protect=protect, on_step=on_step,
        )  # fmt: skip

    # ---- decoding -----------------------------------------------------------------------------

    def _generate(
        self, torch: Any, Y: NDArray[np.float64], H: NDArray[np.float64] | None,
        hyps: list[list[int]] | None, *, greedy: bool, gen: np.random.Generator,
        chunk: int | None = None,
    ) -> list[list[int]]:  # fmt: skip
        dev = self._device
        chunk = chunk or (256 if dev.type == "cpu" else 2048)
        out: list[list[int]] = []
        for s in range(0, Y.shape[0], chunk):
            sl = slice(s, s + chunk)
            conds = self._conds(torch, Y[sl], None if H is None else H[sl])
            hyp = None
            if hyps is not None:
                hyp = torch.from_numpy(self._pad(hyps[sl], False)).to(dev)
            B = conds[0].shape[0]
            text = torch.full((B, 1), BOS, dtype=torch.long, device=dev)
            done = torch.zeros(B, dtype=torch.bool, device=dev)
            g = torch.Generator(device=dev).manual_seed(seed_from(gen))
            with torch.no_grad():
                logits, state = self.model_.start(conds, hyp, text)
                for _ in range(self.max_len + 1):
                    logits = logits.clone()
                    logits[:, [PAD, BOS, UNK, SEP]] = -float("inf")
                    if greedy:
                        nxt = logits.argmax(-1)
                    else:
                        p = torch.softmax(logits / self.temperature, -1)
                        nxt = torch.multinomial(p, 1, generator=g)[:, 0]
                    nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
                    text = torch.cat([text, nxt[:, None]], 1)
                    done |= nxt == EOS
                    if bool(done.all()):
                        break
                    logits, state = self.model_.step(nxt, state)
            for row in text[:, 1:].tolist():
                out.append([t for t in row if t != PAD][: self.max_len + 1])
        return out

    def _texts(self, seqs: list[list[int]]) -> list[str]:
        assert self.vocabulary_ is not None
        return [self._pieces.join(self.vocabulary_.pieces_of(s)) for s in seqs]

    def reconstruct(
        self,
        embeddings: Any,
        *,
        embed: Embed | None = None,
        rounds: int | None = None,
        candidates: int | None = None,
        rng: Any = 0,
    ) -> list[str]:
        """A sentence for every embedding (see the module notes for the correction rounds).

        Without ``embed`` (or with ``rounds=0`` and ``candidates=1``) this is the greedy first
        hypothesis. ``rng`` seeds the sampled candidates (default 0: reproducible).
        """
        if self.model_ is None or self.vocabulary_ is None:
            raise RuntimeError(
                "this TransformerInversionAttack is not fitted yet; call fit() first."
            )
        Y = embeddings_f64(embeddings, "embeddings")
        if Y.shape[1] != self.dim_:
            raise DataError(
                f"embeddings have dimension {Y.shape[1]} but the attack was fitted on {self.dim_}."
            )
        rounds = self.rounds if rounds is None else check_int("rounds", rounds, ge=0)
        k = self.candidates if candidates is None else check_int("candidates", candidates, ge=1)
        torch = torch_module()
        gen = as_generator(rng)
        self.model_.eval()
        with torch_threads(torch, self.num_threads):
            first = self._generate(torch, Y, None, None, greedy=True, gen=gen)
            if embed is None or (k == 1 and (rounds == 0 or not self.has_corrector_)):
                return self._texts(first)  # nothing to choose between
            target = _unit(Y)
            best_seq = first
            best_txt = self._texts(first)
            best_emb = embeddings_f64(embed(best_txt), "embed(texts)")
            best_cos = np.einsum("ij,ij->i", _unit(best_emb), target)

            def consider(seqs: list[list[int]]) -> None:
                nonlocal best_emb, best_cos
                txt = self._texts(seqs)
                E = embeddings_f64(embed(txt), "embed(texts)")
                cos = np.einsum("ij,ij->i", _unit(E), target)
                better = cos > best_cos
                for i in np.flatnonzero(better):
                    best_seq[i], best_txt[i] = seqs[i], txt[i]
                best_emb = np.where(better[:, None], E, best_emb)
                best_cos = np.maximum(cos, best_cos)

            for _ in range(k - 1):
                consider(self._generate(torch, Y, None, None, greedy=False, gen=gen))
            for _ in range(rounds if self.has_corrector_ else 0):
                H, hyps = best_emb.copy(), [list(s) for s in best_seq]
                for c in range(k):
                    consider(self._generate(torch, Y, H, hyps, greedy=c == 0, gen=gen))
        return best_txt

    # ---- scoring ------------------------------------------------------------------------------

    def score(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        embed: Embed | None = None,
        entities: Sequence[Sequence[tuple[str, str]]] | None = None,
        rounds: int | None = None,
        rng: Any = 0,
    ) -> ReconstructionReport:
        """Reconstruct ``embeddings`` and score them against ``texts`` and the blind pairing."""
        texts = _check_texts(texts)
        recs = self.reconstruct(embeddings, embed=embed, rounds=rounds, rng=rng)
        if len(recs) != len(texts):
            raise DataError(f"embeddings has {len(recs)} rows but texts has {len(texts)} entries.")
        return score_against_blind(texts, recs, entities=entities, rng=rng)

    def check(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        embed: Embed | None = None,
        min_excess: float = 0.05,
        rng: Any = 0,
    ) -> StrengthCheck:
        """Strength check on *clean* held-out vectors: is this attack evidence at all?"""
        return strength_verdict(
            self.score(texts, embeddings, embed=embed, rng=rng), min_excess=min_excess
        )

    # ---- persistence --------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the fitted attack to the folder ``path`` (``config.json`` + ``weights.pt``)."""
        if self.model_ is None or self.vocabulary_ is None:
            raise RuntimeError(
                "this TransformerInversionAttack is not fitted yet; call fit() first."
            )
        torch = torch_module()
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        params = self.get_params()
        del params["device"]  # where it runs is the loader's choice
        meta = {
            "format": "privembed-transformer-inversion-1",
            "params": params,
            "dim": self.dim_,
            "vocabulary": self.vocabulary_.pieces,
            "corrector": self.has_corrector_,
            "steps": self.steps_,
            "history": self.history_,
            "correction_history": self.correction_history_,
        }
        tmp = folder / "weights.pt.tmp"
        state = {k: v.detach().cpu() for k, v in self.model_.state_dict().items()}
        for name, arr in (("mu", self._mu), ("sd", self._sd), ("mu_c", self._mu_c),
                          ("sd_c", self._sd_c)):  # fmt: skip
            state[f"_stats.{name}"] = torch.from_numpy(np.asarray(arr, dtype=np.float64))
        torch.save(state, tmp)
        tmp.replace(folder / "weights.pt")
        (folder / "config.json").write_text(json.dumps(meta, indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> TransformerInversionAttack:
        """A fitted attack from a folder written by :meth:`save` (``overrides``: decoding
        settings such as ``rounds``, ``num_threads`` or ``device``). Weights load with ``weights_only=True``
        (no pickled code runs)."""
        folder = Path(path)
        cfg_path = folder / "config.json"
        if not cfg_path.is_file() or not (folder / "weights.pt").is_file():
            raise FileNotFoundError(
                f"no saved inversion attack in {folder} (config.json, weights.pt)."
            )
        meta = json.loads(cfg_path.read_text())
        if meta.get("format") != "privembed-transformer-inversion-1":
            raise DataError(f"{cfg_path} is not a saved TransformerInversionAttack.")
        params = {**meta["params"], **overrides}
        atk = cls(**params)
        torch = torch_module()
        state = torch.load(folder / "weights.pt", weights_only=True, map_location="cpu")
        stats = {
            k.split(".", 1)[1]: state.pop(k).numpy() for k in list(state) if k.startswith("_stats.")
        }
        atk._mu, atk._sd, atk._mu_c, atk._sd_c = (stats[k] for k in ("mu", "sd", "mu_c", "sd_c"))
        atk.vocabulary_ = _Vocab(meta["vocabulary"])
        atk.dim_ = int(meta["dim"])
        gen = np.random.default_rng(0)
        with torch_threads(torch, atk.num_threads):
            atk._new_model(torch, atk.dim_, gen)
            atk.model_.load_state_dict(state)
        atk.model_.eval()
        atk.steps_ = int(meta.get("steps", 0))
        atk.history_ = list(meta.get("history", []))
        atk.correction_history_ = list(meta.get("correction_history", []))
        atk.has_corrector_ = bool(meta.get("corrector", False))
        return atk
