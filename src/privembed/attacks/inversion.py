r"""Sentence-level inversion: reconstruct the text from its (protected) embedding.

Two attackers:

* :class:`GEIAAttack` -- GEIA-style generative inversion (Li et al. 2023), trained from scratch.
  GEIA feeds the embedding to a pretrained GPT-2 as a prefix; no pretrained language model can
  be downloaded here, so the decoder is a small word-level GRU language model learned on the
  attacker's auxiliary corpus, conditioned on the embedding twice: through the initial hidden
  state :math:`h_0 = \tanh(W_h e)` and as an extra input :math:`W_c e` at every step. Decoding
  is greedy or beam search. Much weaker than GEIA with GPT-2 on open text; on templated corpora
  (clinical notes) the corpus itself supplies the language model and the decoder learns to fill
  in the sensitive values. An adaptive attacker trains on protected auxiliary embeddings
  (:meth:`GEIAAttack.fit_adaptive`).
* :class:`Vec2TextAdapter` -- runs vec2text's pretrained hypothesiser + corrector (Morris et al.
  2023) where a user has ``vec2text`` installed and the weights available (the Hugging Face cache
  or local folders). Its pretrained models invert GTR-base (768-d) and OpenAI ada-002 (1536-d)
  embeddings only -- not all-MiniLM-L6-v2.

Both report Leakage ([T26] eq. 13 as written: a sensitive token is recovered if it appears in the
reconstructed sentence), word-set precision/recall/F1 and exact matches; ``leakage_chance`` is the
leakage of the single sentence the decoder produces from the *mean* auxiliary embedding (what it
says knowing nothing about the input).

References
----------
.. [GEIA] Li, Xu, Song (2023). Sentence embedding leaks more information than you expect:
   generative embedding inversion attack to recover the whole sentence. Findings of ACL.
.. [V2T] Morris, Kuleshov, Shmatikov, Rush (2023). Text embeddings reveal (almost) as much as
   text. EMNLP.
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). Eq. 13.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._validation import (
    DataError,
    check_bool,
    check_int,
    check_optional_int,
    check_training,
)
from ..core.rng import as_generator
from . import metrics
from ._common import (
    TokenIndex,
    as_token_sets,
    by_frequency,
    decoded,
    embeddings_f64,
    seed_from,
    standard_scale,
    torch_module,
    torch_threads,
)
from .base import AdaptiveFit

__all__ = [
    "GEIAAttack",
    "InversionReport",
    "Vec2TextAdapter",
    "WordVocabulary",
    "score_reconstructions",
    "sentence_tokens",
]

_SENT = re.compile(r"\w+|[^\w\s]")
PAD, BOS, EOS, UNK = 0, 1, 2, 3
_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def sentence_tokens(text: str) -> list[str]:
    """Lower-cased words and punctuation marks of ``text`` (the decoder's units).

    Examples
    --------
    >>> sentence_tokens("Seen on Monday, in Paris.")
    ['seen', 'on', 'monday', ',', 'in', 'paris', '.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}.")
    return _SENT.findall(text.lower())


def detokenize(tokens: Sequence[str]) -> str:
    """Join decoder tokens into a sentence (no space before punctuation).

    Examples
    --------
    >>> detokenize(["seen", "on", "monday", ",", "in", "paris", "."])
    'seen on monday, in paris.'
    """
    out = ""
    for t in tokens:
        if out and re.match(r"\w", t):
            out += " "
        out += t
    return out


class WordVocabulary(TokenIndex):
    """Word-level vocabulary of the decoder: 4 special symbols, then tokens by frequency.

    Examples
    --------
    >>> v = WordVocabulary.build([["a", "b", "a"], ["a", "c"]], min_count=2)
    >>> v.tokens, v.encode(["a", "z"], max_len=5).tolist(), v.decode([1, 4, 3, 2, 4])
    (['<pad>', '<bos>', '<eos>', '<unk>', 'a'], [1, 4, 3, 2, 0, 0, 0], ['a', '<unk>'])
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        toks = list(tokens)
        if toks[:4] != list(_SPECIALS):
            raise DataError(f"the first four tokens must be {_SPECIALS}.")
        super().__init__(toks)

    @classmethod
    def build(
        cls, sentences: Iterable[Sequence[str]], *, min_count: int = 1, max_size: int | None = None
    ) -> WordVocabulary:
        limit = None if max_size is None else max(0, max_size - len(_SPECIALS))
        return cls([*_SPECIALS, *by_frequency(sentences, min_count=min_count, limit=limit)])

    def encode(self, tokens: Sequence[str], *, max_len: int) -> NDArray[np.int64]:
        """``<bos> ids... <eos>`` padded to ``max_len + 2`` (longer sentences are cut)."""
        ids = [self.index.get(t, UNK) for t in tokens[:max_len]]
        out = np.zeros(max_len + 2, dtype=np.int64)
        out[: len(ids) + 2] = [BOS, *ids, EOS]
        return out

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens after ``<bos>`` up to ``<eos>``."""
        return decoded(ids, self.tokens, end=EOS, silent=(PAD, BOS))


@dataclass(frozen=True)
class InversionReport:
    """Scores of reconstructed sentences."""

    leakage: float
    leakage_chance: float
    precision: float
    recall: float
    f1: float
    exact_match: float
    n_texts: int
    n_sensitive: int
    examples: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_reconstructions(
    texts: Sequence[str],
    reconstructions: Sequence[str],
    *,
    sensitive: Iterable[Iterable[str]] | None = None,
    blind: str | None = None,
    n_examples: int = 3,
) -> InversionReport:
    """Leakage ([T26] eq. 13) and word-set scores of reconstructed sentences.

    Parameters
    ----------
    texts, reconstructions : sequences of str, same length
    sensitive : sequence of sets of str, optional
        Sensitive tokens per text (default: all its word tokens).
    blind : str, optional
        A sentence produced without looking at the input; its leakage is ``leakage_chance``.

    Examples
    --------
    >>> r = score_reconstructions(["Ann has flu.", "Bob"], ["ann has a cold.", "bob"],
    ...                           sensitive=[{"ann", "flu"}, {"bob"}])
    >>> round(r.leakage, 3), r.exact_match
    (0.667, 0.5)
    """
    texts = list(texts)
    recs = list(reconstructions)
    if len(texts) != len(recs):
        raise DataError(f"texts has {len(texts)} entries but reconstructions has {len(recs)}.")
    true = as_token_sets(texts)
    R = as_token_sets([r if r.strip() else [] for r in recs], "reconstructions")
    S = true if sensitive is None else as_token_sets(sensitive, "sensitive")
    if len(S) != len(true):
        raise DataError(f"sensitive has {len(S)} entries but texts has {len(true)}.")
    f = metrics.set_f1(true, R)
    blind_set = frozenset(as_token_sets([blind])[0]) if blind else frozenset()
    exact = np.mean(
        [sentence_tokens(t) == sentence_tokens(r) for t, r in zip(texts, recs, strict=True)]
    )
    return InversionReport(
        leakage=metrics.leakage(S, R),
        leakage_chance=metrics.leakage(S, [blind_set] * len(S))
        if blind is not None
        else float("nan"),
        precision=f["precision"],
        recall=f["recall"],
        f1=f["f1"],
        exact_match=float(exact),
        n_texts=len(texts),
        n_sensitive=sum(len(s) for s in S),
        examples=[
            {"text": t, "reconstruction": r}
            for t, r in list(zip(texts, recs, strict=True))[:n_examples]
        ],
    )


def _decoder_class(torch: Any) -> Any:
    nn = torch.nn

    class Decoder(nn.Module):  # type: ignore[name-defined]
        def __init__(self, d_in: int, vocab: int, emb_dim: int, hidden: int, layers: int) -> None:
            super().__init__()
            self.layers, self.hidden = layers, hidden
            self.init = nn.Linear(d_in, layers * hidden)
            self.cond = nn.Linear(d_in, emb_dim)
            self.emb = nn.Embedding(vocab, emb_dim, padding_idx=PAD)
            self.gru = nn.GRU(2 * emb_dim, hidden, num_layers=layers, batch_first=True)
            self.out = nn.Linear(hidden, vocab)

        def start(self, e: Any) -> tuple[Any, Any]:
            h0 = torch.tanh(self.init(e)).view(e.shape[0], self.layers, self.hidden)
            return h0.transpose(0, 1).contiguous(), self.cond(e)

        def forward(self, e: Any, tokens: Any) -> Any:
            h0, c = self.start(e)
            x = torch.cat([self.emb(tokens), c[:, None, :].expand(-1, tokens.shape[1], -1)], -1)
            y, _ = self.gru(x, h0)
            return self.out(y)

        def step(self, tok: Any, c: Any, h: Any) -> tuple[Any, Any]:
            x = torch.cat([self.emb(tok), c], -1)[:, None, :]
            y, h = self.gru(x, h)
            return torch.log_softmax(self.out(y[:, 0]), -1), h

    return Decoder


class GEIAAttack(AdaptiveFit):
    """Embedding-conditioned word-level GRU decoder trained from scratch (GEIA-style).

    Parameters
    ----------
    emb_dim : int, default 128
        Word embedding size (and size of the per-step embedding condition).
    hidden : int, default 256
        GRU state size.
    layers : int, default 1
    epochs : int, default 20
    batch_size : int, default 64
    lr : float, default 1e-3
    min_count : int, default 1
    max_vocabulary : int, optional
    max_len : int, default 48
        Tokens per sentence (training truncates, decoding stops there).
    beam : int, default 1
        Beam width at decoding (1 = greedy).
    standardize : bool, default True
        Z-score the conditioning embedding with the training statistics.
    num_threads : int or None, default 1

    Examples
    --------
    >>> texts = ["red cat", "blue dog"] * 40
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]] * 40)
    >>> atk = GEIAAttack(emb_dim=8, hidden=16, epochs=30, lr=1e-2).fit(texts, X, rng=0)
    >>> atk.reconstruct(np.array([[1.0, 0.1], [0.1, 1.0]]))
    ['red cat', 'blue dog']
    """

    def __init__(
        self,
        *,
        emb_dim: int = 128,
        hidden: int = 256,
        layers: int = 1,
        epochs: int = 20,
        batch_size: int = 64,
        lr: float = 1e-3,
        min_count: int = 1,
        max_vocabulary: int | None = None,
        max_len: int = 48,
        beam: int = 1,
        standardize: bool = True,
        num_threads: int | None = 1,
    ) -> None:
        self.emb_dim = check_int("emb_dim", emb_dim, ge=1)
        self.hidden = check_int("hidden", hidden, ge=1)
        self.layers = check_int("layers", layers, ge=1)
        self.epochs, self.batch_size, self.lr, self.num_threads = check_training(
            epochs, batch_size, lr, num_threads
        )
        self.min_count = check_int("min_count", min_count, ge=1)
        self.max_vocabulary = check_optional_int("max_vocabulary", max_vocabulary, ge=5)
        self.max_len = check_int("max_len", max_len, ge=1)
        self.beam = check_int("beam", beam, ge=1)
        self.standardize = check_bool("standardize", standardize)
        self.vocabulary_: WordVocabulary | None = None
        self.model_: Any = None
        self.history_: list[float] = []

    def __repr__(self) -> str:
        return f"GEIAAttack(hidden={self.hidden}, epochs={self.epochs}, beam={self.beam})"

    def get_params(self) -> dict[str, Any]:
        return {
            "emb_dim": self.emb_dim,
            "hidden": self.hidden,
            "layers": self.layers,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "min_count": self.min_count,
            "max_vocabulary": self.max_vocabulary,
            "max_len": self.max_len,
            "beam": self.beam,
            "standardize": self.standardize,
        }

    def _inputs(self, X: NDArray[np.float64]) -> NDArray[np.float32]:
        return ((X - self._mu) / self._sd).astype(np.float32)

    def fit(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        rng: Any = None,
        on_epoch: Callable[[int], None] | None = None,
    ) -> GEIAAttack:
        """Train the decoder on auxiliary texts and their (protected) embeddings.

        ``on_epoch(done)`` is called after every epoch with the number of epochs done.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string.")
        texts = list(texts)
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[0] != len(texts):
            raise DataError(f"embeddings has {X.shape[0]} rows but texts has {len(texts)} entries.")
        toks = [sentence_tokens(t) for t in texts]
        self.vocabulary_ = WordVocabulary.build(
            toks, min_count=self.min_count, max_size=self.max_vocabulary
        )
        ids = np.stack([self.vocabulary_.encode(t, max_len=self.max_len) for t in toks])
        ids = ids[:, : int((ids != PAD).sum(axis=1).max())]  # drop all-padding columns
        self._mu, self._sd = standard_scale(X, self.standardize)
        self.dim_ = X.shape[1]
        torch = torch_module()
        gen = as_generator(rng)
        with torch_threads(torch, self.num_threads):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed_from(gen))
                self.model_ = _decoder_class(torch)(
                    X.shape[1], len(self.vocabulary_), self.emb_dim, self.hidden, self.layers
                )
            E = torch.from_numpy(self._inputs(X))
            T = torch.from_numpy(ids)
            opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
            loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD)
            self.model_.train()
            self.history_ = []
            n = X.shape[0]
            for _ in range(self.epochs):
                order = torch.from_numpy(gen.permutation(n))
                total = 0.0
                for s in range(0, n, self.batch_size):
                    idx = order[s : s + self.batch_size]
                    batch = T[idx]
                    logits = self.model_(E[idx], batch[:, :-1])
                    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
                    opt.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(self.model_.parameters(), 1.0)
                    opt.step()
                    total += float(loss.detach()) * idx.numel()
                self.history_.append(total / n)
                if on_epoch is not None:
                    on_epoch(len(self.history_))
            self.model_.eval()
        self._blind = self.reconstruct(self._mu[None, :])[0]
        return self

    def reconstruct(self, embeddings: Any, *, beam: int | None = None) -> list[str]:
        """Decoded sentence of every embedding (greedy, or beam search of width ``beam``)."""
        if self.model_ is None or self.vocabulary_ is None:
            raise RuntimeError("this GEIAAttack is not fitted yet; call fit() first.")
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[1] != self.dim_:
            raise DataError(
                f"embeddings have dimension {X.shape[1]} but the attack was fitted on {self.dim_}."
            )
        width = self.beam if beam is None else check_int("beam", beam, ge=1)
        torch = torch_module()
        E = torch.from_numpy(self._inputs(X))
        with torch_threads(torch, self.num_threads), torch.no_grad():
            if width == 1:
                seqs = self._greedy(torch, E)
            else:
                seqs = [self._beam(torch, E[i : i + 1], width) for i in range(E.shape[0])]
        return [detokenize(self.vocabulary_.decode(s)) for s in seqs]

    def _mask(self, logp: Any) -> Any:
        logp[:, [PAD, BOS, UNK]] = -float("inf")
        return logp

    def _greedy(self, torch: Any, E: Any) -> list[list[int]]:
        h, c = self.model_.start(E)
        tok = torch.full((E.shape[0],), BOS, dtype=torch.long)
        out = []
        done = torch.zeros(E.shape[0], dtype=torch.bool)
        for _ in range(self.max_len + 1):
            logp, h = self.model_.step(tok, c, h)
            tok = self._mask(logp).argmax(-1)
            out.append(tok)
            done |= tok == EOS
            if bool(done.all()):
                break
        return list(torch.stack(out, 1).tolist())

    def _beam(self, torch: Any, e: Any, width: int) -> list[int]:
        h, c = self.model_.start(e)
        beams: list[tuple[float, list[int]]] = [(0.0, [])]
        finished: list[tuple[float, list[int]]] = []
        for _ in range(self.max_len + 1):
            k = len(beams)
            tok = torch.tensor([b[1][-1] if b[1] else BOS for b in beams], dtype=torch.long)
            logp, h_new = self.model_.step(tok, c.expand(k, -1), h)
            logp = self._mask(logp)
            scores = torch.tensor([b[0] for b in beams])[:, None] + logp
            top = torch.topk(scores.view(-1), min(width, scores.numel()))
            V = logp.shape[1]
            nxt, rows = [], []
            for sc, flat in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                r, t = divmod(flat, V)
                seq = [*beams[r][1], t]
                if t == EOS:
                    finished.append((sc / len(seq), seq))
                else:
                    nxt.append((sc, seq))
                    rows.append(r)
            if not nxt or len(finished) >= width:
                break
            beams = nxt
            h = h_new[:, rows, :]
        if not finished:
            finished = [(s / max(1, len(q)), q) for s, q in beams]
        return max(finished, key=lambda f: f[0])[1]

    def score(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        sensitive: Iterable[Iterable[str]] | None = None,
        beam: int | None = None,
    ) -> InversionReport:
        """Reconstruct ``embeddings`` and score against the true ``texts``."""
        recs = self.reconstruct(embeddings, beam=beam)
        return score_reconstructions(texts, recs, sensitive=sensitive, blind=self._blind)


# ---------------------------------------------------------------------------------------------
# vec2text
# ---------------------------------------------------------------------------------------------


def _vec2text() -> Any:
    try:
        import vec2text
    except ImportError as exc:
        raise ImportError(
            "vec2text is required for pretrained inversion but not installed; install it with: "
            "pip install vec2text (not a privembed extra: it pulls transformers and its own "
            "torch requirements), and make the corrector weights available locally."
        ) from exc
    for fn in ("load_corrector", "invert_embeddings"):
        if not hasattr(vec2text, fn):
            raise ImportError(f"this vec2text has no {fn}(); privembed needs vec2text >= 0.0.9.")
    return vec2text


class Vec2TextAdapter:
    """Invert embeddings with vec2text's pretrained hypothesiser and corrector ([V2T]).

    Parameters
    ----------
    corrector : vec2text.trainers.Corrector
        As returned by ``vec2text.load_corrector(inversion_model, corrector_model)``.
    dim : int, optional
        Embedding dimension the corrector inverts (checked before inverting).
    num_steps : int or None, default 20
        Correction steps (None: the hypothesiser's single guess).
    sequence_beam_width : int, default 0
    device : str, default "cpu"

    Notes
    -----
    The pretrained models invert *their* embedder's vectors (GTR-base 768-d, OpenAI ada-002
    1536-d); they cannot invert all-MiniLM-L6-v2 vectors. Weights come from the Hugging Face
    cache or from local folders; with ``local_files_only=True`` (the default) nothing is
    downloaded. Without vec2text or without the weights this adapter raises ImportError /
    OSError -- privembed's own tests exercise it offline only up to that point (with a stand-in
    module that records the calls).
    """

    #: pretrained correctors: embedder -> (hypothesiser repo, corrector repo, dimension)
    PRETRAINED: ClassVar[dict[str, tuple[str, str, int]]] = {
        "gtr-base": ("jxm/gtr__nq__32", "jxm/gtr__nq__32__correct", 768),
        "text-embedding-ada-002": (
            "jxm/vec2text__openai_ada002__msmarco__msl128__hypothesizer",
            "jxm/vec2text__openai_ada002__msmarco__msl128__corrector",
            1536,
        ),
    }

    def __init__(
        self,
        corrector: Any,
        *,
        dim: int | None = None,
        num_steps: int | None = 20,
        sequence_beam_width: int = 0,
        device: str = "cpu",
    ) -> None:
        self.corrector = corrector
        self.dim = None if dim is None else check_int("dim", dim, ge=1)
        self.num_steps = None if num_steps is None else check_int("num_steps", num_steps, ge=1)
        self.sequence_beam_width = check_int("sequence_beam_width", sequence_beam_width, ge=0)
        if self.num_steps is None and self.sequence_beam_width:
            raise ValueError("sequence_beam_width needs num_steps (vec2text's rule).")
        self.device = str(device)

    @classmethod
    def from_local(
        cls,
        inversion_model: str,
        corrector_model: str,
        *,
        dim: int | None = None,
        local_files_only: bool = True,
        **kwargs: Any,
    ) -> Vec2TextAdapter:
        """Load a hypothesiser and a corrector (folders or hub names) and build the corrector."""
        v2t = _vec2text()
        inv = v2t.models.InversionModel.from_pretrained(
            inversion_model, local_files_only=local_files_only
        )
        cor = v2t.models.CorrectorEncoderModel.from_pretrained(
            corrector_model, local_files_only=local_files_only
        )
        return cls(v2t.load_corrector(inv, cor), dim=dim, **kwargs)

    @classmethod
    def from_pretrained(
        cls, embedder: str = "gtr-base", *, local_files_only: bool = True, **kwargs: Any
    ) -> Vec2TextAdapter:
        """vec2text's pretrained corrector for ``embedder`` ("gtr-base" or "text-embedding-ada-002")."""
        if embedder not in cls.PRETRAINED:
            opts = ", ".join(repr(k) for k in cls.PRETRAINED)
            raise ValueError(f"embedder must be one of {opts}, got embedder={embedder!r}.")
        inv, cor, dim = cls.PRETRAINED[embedder]
        return cls.from_local(inv, cor, dim=dim, local_files_only=local_files_only, **kwargs)

    def reconstruct(self, embeddings: Any) -> list[str]:
        """Inverted text of every embedding."""
        X = embeddings_f64(embeddings, "embeddings")
        if self.dim is not None and X.shape[1] != self.dim:
            raise DataError(
                f"embeddings have dimension {X.shape[1]} but this corrector inverts {self.dim}-d "
                "vectors of its own embedder."
            )
        v2t = _vec2text()
        torch = torch_module()
        t = torch.from_numpy(X.astype(np.float32)).to(self.device)
        out = v2t.invert_embeddings(
            embeddings=t,
            corrector=self.corrector,
            num_steps=self.num_steps,
            sequence_beam_width=self.sequence_beam_width,
        )
        return [str(s) for s in out]

    def score(
        self,
        texts: Sequence[str],
        embeddings: Any,
        *,
        sensitive: Iterable[Iterable[str]] | None = None,
    ) -> InversionReport:
        """Invert ``embeddings`` and score against the true ``texts`` (no blind baseline)."""
        return score_reconstructions(texts, self.reconstruct(embeddings), sensitive=sensitive)
