r"""Token inference: a multi-label classifier that reads which words a text contains from its embedding.

The MLC attack of Song & Raghunathan (2020), as configured in [T26] App. I.3: an MLP with hidden
layers 512-256-128 (ReLU) and a sigmoid per vocabulary token, trained with binary cross-entropy
(Adam, lr 1e-4, batch 64, 20 epochs) on (embedding, token set) pairs of an auxiliary corpus the
attacker owns. An *adaptive* attacker ([T26]) trains on auxiliary embeddings protected by the
very mechanism and parameters it attacks (:meth:`MLCAttack.fit_adaptive`).

Scores (see :mod:`privembed.attacks.metrics`): Leakage ([T26] eq. 13) with *recovered* meaning
:math:`p_i(t) \ge` ``threshold`` (default 0.5, the decision rule of a sigmoid output trained with
BCE) or, if ``top_k`` is given, :math:`t` among the ``top_k`` most probable tokens; Confidence
(eq. 14); per-token AUC of presence ([F26] Table 2), macro-averaged over the sensitive tokens and
over the whole vocabulary.

References
----------
.. [SR20] Song, Raghunathan (2020). Information leakage in embedding models. CCS. §4 (inversion as
   multi-label classification).
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. I.3, eqs. 13-14.
.. [F26] Anisotropic noise fingerprints reveal concept choice in concept-aware embedding privacy.
   Table 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_bool, check_int, check_optional_int, check_real
from ..core.rng import as_generator
from . import metrics
from ._common import (
    MLPFit,
    TokenIndex,
    as_token_sets,
    by_frequency,
    embeddings_f64,
    standard_scale,
    torch_module,
    torch_threads,
)
from .base import AdaptiveFit, AttackResult

__all__ = ["AUDIT_SETTINGS", "T26_SETTINGS", "MLCAttack", "TokenInferenceReport", "TokenVocabulary"]

#: [T26] App. I.3's training settings (the class defaults), kept to reproduce the paper.
T26_SETTINGS: dict[str, Any] = {"hidden": (512, 256, 128), "epochs": 20, "lr": 1e-4}

#: Settings for *auditing* a release (what ``privembed evaluate`` and
#: :class:`~privembed.evaluation.TokenLeakage` use by default). An audit is only evidence when
#: the attack recovers more than a blind attacker from unprotected embeddings, and [T26]'s
#: settings often do not on a few hundred records: on the demo notes and on the PII sentences
#: (all-MiniLM-L6-v2, 150 attacker records, 150 targets, seeds 0-2) the 95% interval of their
#: leakage excess over the blind attacker excluded 0 in 1 of 3 seeds on each corpus. One hidden
#: layer of 256, 40 epochs at lr 3e-3 and "recovered" = the 10 most probable tokens of a text
#: excluded it in 3 of 3 on both (excess +0.017 to +0.023 on the demo notes, +0.056 to +0.063
#: on the PII sentences); docs/reproductions/attack_strength.py measures six settings.
AUDIT_SETTINGS: dict[str, Any] = {"hidden": (256,), "epochs": 40, "lr": 3e-3, "top_k": 10}


class TokenVocabulary(TokenIndex):
    """The tokens an attacker predicts: the most frequent tokens of its auxiliary corpus.

    Parameters
    ----------
    tokens : sequence of str
        Column order of the classifier's outputs.

    Examples
    --------
    >>> v = TokenVocabulary.build([{"a", "b"}, {"a"}, {"c"}], min_count=2)
    >>> v.tokens, v.encode([{"a", "z"}]).tolist()
    (['a'], [[1.0]])
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        toks = list(tokens)
        if not toks:
            raise DataError("the token vocabulary is empty (min_count too high?).")
        if len(set(toks)) != len(toks):
            raise DataError("vocabulary tokens must be unique.")
        super().__init__(toks)

    @classmethod
    def build(
        cls,
        token_sets: Iterable[AbstractSet[str]],
        *,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> TokenVocabulary:
        """Tokens in at least ``min_count`` texts, most frequent first (ties: alphabetical)."""
        min_count = check_int("min_count", min_count, ge=1)
        limit = check_optional_int("max_size", max_size, ge=1)
        return cls(by_frequency(token_sets, min_count=min_count, limit=limit))

    def encode(self, token_sets: Sequence[AbstractSet[str]]) -> NDArray[np.float32]:
        """Multi-hot matrix (n, V) of the in-vocabulary tokens of each set."""
        Y = np.zeros((len(token_sets), len(self)), dtype=np.float32)
        for i, s in enumerate(token_sets):
            cols = [self.index[t] for t in s if t in self.index]
            Y[i, cols] = 1.0
        return Y


@dataclass(frozen=True)
class TokenInferenceReport:
    """Scores of a token-inference attack on one set of protected embeddings.

    Attributes
    ----------
    leakage : float
        [T26] eq. 13 on the sensitive tokens, in [0, 1].
    confidence : float
        [T26] eq. 14, in [0, 1].
    auc_sensitive, auc_all : float
        Macro mean per-token AUC over sensitive tokens (those in the vocabulary, present in some
        but not all test texts) and over all such vocabulary tokens; 0.5 is chance.
    leakage_chance : float
        Leakage of a blind attacker that recovers the same number of tokens per text, chosen by
        training-set frequency alone (no embedding): what leakage means nothing beyond.
    leakage_excess_low, leakage_excess_high : float
        95% paired bootstrap interval (over texts) of ``leakage - leakage_chance``
        (:func:`~privembed.attacks.metrics.leakage_excess`): the attack beats the blind
        attacker when the lower end is above 0.
    precision, recall, f1 : float
        Of the recovered sets against all tokens of the texts.
    rule : str
        What "recovered" meant (``"p>=0.5"`` or ``"top-10"``).
    n_texts, n_sensitive, vocabulary_size, sensitive_in_vocabulary : int
    """

    leakage: float
    confidence: float
    auc_sensitive: float
    auc_all: float
    leakage_chance: float
    precision: float
    recall: float
    f1: float
    rule: str
    n_texts: int
    n_sensitive: int
    vocabulary_size: int
    sensitive_in_vocabulary: int
    leakage_excess_low: float = float("nan")
    leakage_excess_high: float = float("nan")

    @property
    def beats_chance(self) -> bool:
        """Whether the leakage is above the blind attacker's with 95% confidence."""
        return bool(self.leakage_excess_low > 0)

    def result(self) -> AttackResult:
        """Leakage against the blind (token-frequency) attacker, with the paired bootstrap
        interval of the excess."""
        return AttackResult(
            "token_inference", "leakage", self.leakage, self.leakage_chance,
            self.leakage_excess_low, self.leakage_excess_high,
            f"paired bootstrap over {self.n_texts} texts",
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MLCAttack(AdaptiveFit, MLPFit):
    """Multi-label token classifier on (protected) embeddings ([SR20]; [T26] App. I.3).

    Parameters
    ----------
    hidden : sequence of int, default (512, 256, 128)
    epochs : int, default 20
    batch_size : int, default 64
    lr : float, default 1e-4
        Adam learning rate.
    weight_decay : float, default 0
    min_count : int, default 2
        A token enters the vocabulary if it occurs in at least this many auxiliary texts.
    max_vocabulary : int, optional
        Keep only the most frequent tokens.
    standardize : bool, default True
        Z-score each input dimension with the training mean and standard deviation. An affine map
        the first layer could learn itself, but slowly at lr 1e-4 on unit vectors whose entries
        are ~d^-1/2; it only makes the attacker stronger (a deviation from [T26], which does not
        say).
    threshold : float in (0, 1), default 0.5
        A token is *recovered* if its probability is at least this ...
    top_k : int, optional
        ... or, if given, if it is among the ``top_k`` most probable tokens of the text.
    num_threads : int or None, default 1
        torch threads while training (restored afterwards).

    Notes
    -----
    The defaults are [T26]'s (:data:`T26_SETTINGS`). On a small auxiliary corpus they underfit:
    with 1,500 clinical notes (~470 Adam steps) the classifier learns little beyond the token
    base rates (per-token AUC 0.51 on *unprotected* all-MiniLM-L6-v2 embeddings), so an audit
    that reports low leakage with them proves nothing. Audits use :data:`AUDIT_SETTINGS`
    (``MLCAttack(**AUDIT_SETTINGS)``), and every audit first checks that the attack beats the
    blind attacker on unprotected embeddings (:attr:`TokenInferenceReport.beats_chance`).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> sets = [{"red"} if i % 2 else {"blue"} for i in range(200)]
    >>> X = rng.standard_normal((200, 8)); X[:, 0] += [3.0 if "red" in s else -3.0 for s in sets]
    >>> atk = MLCAttack(hidden=(16,), epochs=30, lr=1e-2, min_count=1).fit(sets, X, rng=0)
    >>> r = atk.score(sets, X, sensitive=[{"red"} & s for s in sets])
    >>> r.leakage > 0.9, r.auc_sensitive > 0.9
    (True, True)
    """

    def __init__(
        self,
        *,
        hidden: Sequence[int] = (512, 256, 128),
        epochs: int = 20,
        batch_size: int = 64,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        min_count: int = 2,
        max_vocabulary: int | None = None,
        standardize: bool = True,
        threshold: float = 0.5,
        top_k: int | None = None,
        num_threads: int | None = 1,
    ) -> None:
        self._set_training(hidden, epochs, batch_size, lr, weight_decay, num_threads)
        self.min_count = check_int("min_count", min_count, ge=1)
        self.max_vocabulary = check_optional_int("max_vocabulary", max_vocabulary, ge=1)
        self.standardize = check_bool("standardize", standardize)
        self.threshold = check_real("threshold", threshold, gt=0, lt=1)
        self.top_k = None if top_k is None else check_int("top_k", top_k, ge=1)
        self.vocabulary_: TokenVocabulary | None = None
        self.model_: Any = None
        self.history_: list[float] = []

    def get_params(self) -> dict[str, Any]:
        return {
            "hidden": list(self.hidden),
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "min_count": self.min_count,
            "max_vocabulary": self.max_vocabulary,
            "standardize": self.standardize,
            "threshold": self.threshold,
            "top_k": self.top_k,
        }

    def __repr__(self) -> str:
        return f"MLCAttack(hidden={self.hidden}, epochs={self.epochs}, lr={self.lr!r})"

    @property
    def rule(self) -> str:
        """What *recovered* means for this attack."""
        return f"top-{self.top_k}" if self.top_k is not None else f"p>={self.threshold:g}"

    # -- training -------------------------------------------------------------------------

    def fit(
        self,
        texts: Iterable[Any],
        embeddings: Any,
        *,
        rng: Any = None,
        on_epoch: Callable[[int], None] | None = None,
    ) -> MLCAttack:
        """Train on auxiliary texts (or token sets) and their (protected) embeddings.

        Parameters
        ----------
        texts : sequence of str or of sets of str, length n
            Texts are tokenised with :func:`~privembed.attacks._common.word_tokens`.
        embeddings : array_like, shape (n, d)
        rng : int, numpy.random.Generator or None
            Seeds the initialisation and the minibatch order.
        on_epoch : callable, optional
            Called with the number of epochs done after each epoch (progress).
        """
        sets = as_token_sets(texts)
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[0] != len(sets):
            raise DataError(f"embeddings has {X.shape[0]} rows but texts has {len(sets)} entries.")
        torch = torch_module()
        gen = as_generator(rng)
        self.vocabulary_ = TokenVocabulary.build(
            sets, min_count=self.min_count, max_size=self.max_vocabulary
        )
        Y = self.vocabulary_.encode(sets)
        self._mu, self._sd = standard_scale(X, self.standardize)
        self._prior = Y.mean(axis=0)
        self.dim_ = X.shape[1]
        self.history_ = self._fit_mlp(
            torch, torch.nn.BCEWithLogitsLoss(), self._inputs(X), Y, len(self.vocabulary_), gen,
            on_epoch,
        )  # fmt: skip
        return self

    def _adaptive_targets(self, texts: Iterable[Any]) -> list[Any]:
        return as_token_sets(texts)  # the adaptive fit (AdaptiveFit) repeats the sets

    def _inputs(self, X: NDArray[np.float64]) -> NDArray[np.float32]:
        return ((X - self._mu) / self._sd).astype(np.float32)

    def _check_fitted(self) -> TokenVocabulary:
        if self.vocabulary_ is None or self.model_ is None:
            raise RuntimeError("this MLCAttack is not fitted yet; call fit() first.")
        return self.vocabulary_

    # -- inference ------------------------------------------------------------------------

    def predict_proba(self, embeddings: Any) -> NDArray[np.float64]:
        """Probability (n, V) that each vocabulary token occurs in each text."""
        self._check_fitted()
        X = embeddings_f64(embeddings, "embeddings")
        if X.shape[1] != self.dim_:
            raise DataError(
                f"embeddings have dimension {X.shape[1]} but the attack was fitted on {self.dim_}."
            )
        torch = torch_module()
        with torch_threads(torch, self.num_threads), torch.no_grad():
            out = [
                torch.sigmoid(self.model_(torch.from_numpy(self._inputs(X[s : s + 4096])))).numpy()
                for s in range(0, X.shape[0], 4096)
            ]
        return np.concatenate(out).astype(np.float64)

    def recovered(self, proba: Any) -> list[frozenset[str]]:
        """Recovered token sets from a probability matrix, by :attr:`rule`."""
        vocab = self._check_fitted()
        P = np.asarray(proba, dtype=np.float64)
        return _recover(P, vocab.tokens, threshold=self.threshold, top_k=self.top_k)

    def predict(self, embeddings: Any) -> list[frozenset[str]]:
        """The recovered token set of each embedding."""
        return self.recovered(self.predict_proba(embeddings))

    def score(
        self,
        texts: Iterable[Any],
        embeddings: Any,
        *,
        sensitive: Iterable[Iterable[str]] | None = None,
    ) -> TokenInferenceReport:
        """Attack ``embeddings`` and score against the true ``texts``.

        Parameters
        ----------
        texts : sequence of str or of sets of str
            The true texts of the attacked embeddings.
        embeddings : array_like, shape (n, d)
        sensitive : sequence of sets of str, optional
            Sensitive tokens of each text (lower-cased); default: every token of the text.
        """
        vocab = self._check_fitted()
        true = as_token_sets(texts)
        S = true if sensitive is None else as_token_sets(sensitive, "sensitive")
        if len(S) != len(true):
            raise DataError(f"sensitive has {len(S)} entries but texts has {len(true)}.")
        P = self.predict_proba(embeddings)
        if P.shape[0] != len(true):
            raise DataError(f"embeddings has {P.shape[0]} rows but texts has {len(true)} entries.")
        R = self.recovered(P)
        Y = vocab.encode(true)
        sens_cols = sorted({vocab.index[t] for s in S for t in s if t in vocab.index})
        auc_all = metrics.per_token_auc(P, Y)
        auc_sens = metrics.per_token_auc(P, Y, columns=sens_cols) if sens_cols else np.array([])
        blind = self.blind(R)
        f = metrics.set_f1(true, R)
        _, ex_lo, ex_hi = metrics.leakage_excess(S, R, blind, rng=0)
        return TokenInferenceReport(
            leakage=metrics.leakage(S, R),
            confidence=metrics.confidence(S, P, vocab.index),
            auc_sensitive=_nanmean(auc_sens),
            auc_all=_nanmean(auc_all),
            leakage_chance=metrics.leakage(S, blind),
            precision=f["precision"],
            recall=f["recall"],
            f1=f["f1"],
            rule=self.rule,
            n_texts=len(true),
            n_sensitive=sum(len(s) for s in S),
            vocabulary_size=len(vocab),
            sensitive_in_vocabulary=sum(1 for s in S for t in s if t in vocab.index),
            leakage_excess_low=ex_lo,
            leakage_excess_high=ex_hi,
        )

    def blind(self, recovered: Sequence[Iterable[str]]) -> list[frozenset[str]]:
        """The blind attacker's sets: as many tokens per text as ``recovered`` has, chosen by
        training-set frequency alone (no embedding)."""
        vocab = self._check_fitted()
        order = np.argsort(-self._prior, kind="stable")
        return [frozenset(vocab.tokens[j] for j in order[: len(set(r))]) for r in recovered]


def _recover(
    P: NDArray[np.float64], tokens: Sequence[str], *, threshold: float, top_k: int | None
) -> list[frozenset[str]]:
    if top_k is not None:
        k = min(top_k, P.shape[1])
        idx = np.argpartition(-P, k - 1, axis=1)[:, :k]
        return [frozenset(tokens[int(j)] for j in row) for row in idx]
    return [frozenset(tokens[int(j)] for j in np.flatnonzero(row >= threshold)) for row in P]


def _nanmean(a: NDArray[np.float64]) -> float:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")
