r"""Scores of reconstructed sentences against a blind baseline: BLEU, token F1, entity recovery.

An inversion attack writes a sentence :math:`\hat t_i` for every (protected) embedding; the
scores compare it with the true text :math:`t_i`:

* **BLEU** -- corpus BLEU-4 (Papineni et al. 2002): geometric mean of the clipped n-gram
  precisions, n = 1..4, pooled over the corpus, times the brevity penalty
  :math:`\min(1, e^{1 - r/c})` (r, c: total reference and candidate lengths), on lower-cased
  word and punctuation tokens (:func:`privembed.attacks.inversion.sentence_tokens`); in [0, 1].
  An n-gram order with no match at all makes it 0 (no smoothing).
* **token F1** -- per text, the F1 of the reconstruction's word set against the text's word set
  (lower-cased ``\w+`` runs), averaged over texts (macro); a per-text number, so the baseline
  comparison can be paired.
* **entity recovery** -- an entity (a name, a diagnosis, an age: a string in the text) counts as
  recovered when its word tokens occur *contiguously* in the reconstruction's word tokens
  ("jane doe" in "... seen jane doe today"); the rate is over (text, entity) pairs, per entity
  type and overall.

**The blind baseline** is the same attacker's output for *another* text: every score is also
computed with the reconstructions paired to the texts through ``n_blind`` random derangements
(permutations without a fixed point), and averaged. An attack that ignores its input -- one
that writes the same generic sentence for every vector, or that reads only noise -- scores the
same against both pairings in expectation, whatever its output distribution; what it gains over
that is what the vectors told it. Token F1 and entity recovery get a 95% paired bootstrap
interval of the excess over blind (texts resampled, both pairings together).

References
----------
.. [BLEU] Papineni, Roukos, Ward, Zhu (2002). BLEU: a method for automatic evaluation of
   machine translation. ACL.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int, check_real
from ..core.rng import as_generator
from ._common import word_tokens
from .base import AttackResult

__all__ = [
    "EntityScore",
    "ReconstructionReport",
    "StrengthCheck",
    "corpus_bleu",
    "derangement",
    "entity_hits",
    "score_against_blind",
    "strength_verdict",
    "token_f1",
]

_SENT = re.compile(r"\w+|[^\w\s]")


def _toks(text: str) -> list[str]:
    return _SENT.findall(text.lower())


def corpus_bleu(references: Sequence[str], candidates: Sequence[str], *, order: int = 4) -> float:
    """Corpus BLEU-``order`` of ``candidates`` against one reference each (see module notes).

    Examples
    --------
    >>> corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"])
    1.0
    >>> round(corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"]), 4)
    0.5373
    >>> corpus_bleu(["a b c d"], ["e f g h"])
    0.0
    """
    refs, cands = list(references), list(candidates)
    if len(refs) != len(cands):
        raise DataError(f"references has {len(refs)} entries but candidates has {len(cands)}.")
    if not refs:
        raise DataError("references must be non-empty.")
    order = check_int("order", order, ge=1)
    match = [0] * order
    total = [0] * order
    r_len = c_len = 0
    for ref, cand in zip(refs, cands, strict=True):
        r, c = _toks(ref), _toks(cand)
        r_len += len(r)
        c_len += len(c)
        for n in range(1, order + 1):
            cn = Counter(tuple(c[i : i + n]) for i in range(len(c) - n + 1))
            rn = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            match[n - 1] += sum(min(k, rn[g]) for g, k in cn.items())
            total[n - 1] += max(len(c) - n + 1, 0)
    if c_len == 0 or min(match) == 0:
        return 0.0
    log_p = sum(math.log(m / t) for m, t in zip(match, total, strict=True)) / order
    bp = 1.0 if c_len > r_len else math.exp(1.0 - r_len / c_len)
    return float(bp * math.exp(log_p))


def token_f1(references: Sequence[str], candidates: Sequence[str]) -> NDArray[np.float64]:
    """Per-text F1 of the candidate's word set against the reference's (0 when either is empty).

    Examples
    --------
    >>> token_f1(["Ann has flu.", "x"], ["ann has a cold", ""]).round(3).tolist()
    [0.571, 0.0]
    """
    refs, cands = list(references), list(candidates)
    if len(refs) != len(cands):
        raise DataError(f"references has {len(refs)} entries but candidates has {len(cands)}.")
    out = np.zeros(len(refs))
    for i, (r, c) in enumerate(zip(refs, cands, strict=True)):
        R, C = set(word_tokens(r)), set(word_tokens(c))
        tp = len(R & C)
        if tp:
            out[i] = 2 * tp / (len(R) + len(C))
    return out


def _contains(hay: list[str], needle: list[str]) -> bool:
    n = len(needle)
    if n == 0:
        return False
    first = needle[0]
    return any(hay[i] == first and hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def entity_hits(
    entities: Sequence[Sequence[tuple[str, str]]], candidates: Sequence[str]
) -> list[list[bool]]:
    """For every text, whether each of its ``(type, string)`` entities occurs in its candidate.

    Occurs = the entity's word tokens, in order and contiguous, among the candidate's word tokens
    (lower-cased ``\\w+`` runs). An entity with no word token never counts as recovered.

    Examples
    --------
    >>> entity_hits([[("PERSON", "Jane Doe"), ("AGE", "45")]], ["seen jane doe, 54"])
    [[True, False]]
    """
    ents, cands = list(entities), list(candidates)
    if len(ents) != len(cands):
        raise DataError(f"entities has {len(ents)} entries but candidates has {len(cands)}.")
    out = []
    for i, (es, c) in enumerate(zip(ents, cands, strict=True)):
        hay = word_tokens(c)
        row = []
        for e in es:
            if not (isinstance(e, tuple | list) and len(e) == 2):
                raise DataError(f"entities[{i}] must hold (type, string) pairs, got {e!r}.")
            row.append(_contains(hay, word_tokens(str(e[1]))))
        out.append(row)
    return out


def derangement(n: int, rng: Any = None) -> NDArray[np.int64]:
    """A uniformly random permutation of ``range(n)`` with no fixed point (n >= 2).

    Rejection sampling: a uniform permutation is a derangement with probability ~1/e.

    Examples
    --------
    >>> p = derangement(5, rng=0); sorted(p.tolist()), bool((p != np.arange(5)).all())
    ([0, 1, 2, 3, 4], True)
    """
    n = check_int("n", n, ge=2)
    gen = as_generator(rng)
    while True:
        p = gen.permutation(n)
        if not (p == np.arange(n)).any():
            return p.astype(np.int64)


@dataclass(frozen=True)
class EntityScore:
    """Recovery of one entity type: rate, blind rate, excess and its 95% interval."""

    n: int
    recovered: float
    blind: float
    excess_low: float
    excess_high: float


@dataclass(frozen=True)
class ReconstructionReport:
    """Scores of reconstructions and of the blind pairing (see the module notes)."""

    bleu: float
    bleu_blind: float
    token_f1: float
    token_f1_blind: float
    token_f1_excess_interval: tuple[float, float]
    entity_recovery: float
    entity_recovery_blind: float
    entity_excess_interval: tuple[float, float]
    entities: dict[str, EntityScore]
    exact_match: float
    n_texts: int
    n_entities: int
    examples: list[dict[str, str]] = field(default_factory=list)

    def beats_blind(self, *, min_excess: float = 0.0) -> bool:
        """Whether the token-F1 excess over blind is above ``min_excess`` with 95% confidence."""
        return bool(self.token_f1_excess_interval[0] > min_excess)

    def result(self, attack: str = "inversion") -> AttackResult:
        """The headline as :class:`~privembed.attacks.base.AttackResult`: per-text token F1
        against the same reconstructions paired with other texts (paired bootstrap)."""
        lo, hi = self.token_f1_excess_interval
        return AttackResult(
            attack, "token_f1", self.token_f1, self.token_f1_blind, lo, hi,
            "paired bootstrap over texts; blind = the reconstructions paired with other texts",
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["token_f1_excess_interval"] = list(self.token_f1_excess_interval)
        d["entity_excess_interval"] = list(self.entity_excess_interval)
        return d


def _boot(diff: NDArray[np.float64], weight: NDArray[np.float64], idx: NDArray[np.int64]) -> Any:
    den = weight[idx].sum(axis=1)
    return diff[idx].sum(axis=1) / np.where(den > 0, den, 1.0)


def _check_pairs(
    texts: Sequence[str], reconstructions: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The texts and their reconstructions as lists of str, equally many and at least 2."""
    texts, recs = list(texts), list(reconstructions)
    n = len(texts)
    if len(recs) != n:
        raise DataError(f"texts has {n} entries but reconstructions has {len(recs)}.")
    if n < 2:
        raise DataError(f"scoring against a blind pairing needs >= 2 texts, got {n}.")
    for name, seq in (("texts", texts), ("reconstructions", recs)):
        bad = next((i for i, s in enumerate(seq) if not isinstance(s, str)), None)
        if bad is not None:
            raise TypeError(f"{name}[{bad}] must be a str, got {seq[bad]!r}.")
    return texts, recs


def _hits_where(hits: list[list[bool]], mask: list[list[bool]]) -> list[int]:
    """Per text, how many of its entities that ``mask`` selects were recovered."""
    return [
        sum(h for h, m in zip(hs, ms, strict=True) if m) for hs, ms in zip(hits, mask, strict=True)
    ]


def _entity_types(
    ents: list[list[tuple[str, str]]],
    hits: list[list[bool]],
    blind_hits: list[list[list[bool]]],
    idx: NDArray[np.int64],
    q: list[float],
) -> dict[str, EntityScore]:
    """Recovery, blind recovery and the bootstrap interval of the excess, per entity type."""
    per_type: dict[str, EntityScore] = {}
    for typ in sorted({str(t) for es in ents for t, _ in es}):
        mask = [[str(t) == typ for t, _ in es] for es in ents]
        c_t = np.array([sum(m) for m in mask], dtype=np.float64)
        o_t = np.array(_hits_where(hits, mask), dtype=np.float64)
        b_t = np.mean([_hits_where(bh, mask) for bh in blind_hits], axis=0)
        lo, hi = np.quantile(_boot(o_t - b_t, c_t, idx), q)
        per_type[typ] = EntityScore(
            n=int(c_t.sum()),
            recovered=float(o_t.sum() / c_t.sum()),
            blind=float(b_t.sum() / c_t.sum()),
            excess_low=float(lo),
            excess_high=float(hi),
        )
    return per_type


def score_against_blind(
    texts: Sequence[str],
    reconstructions: Sequence[str],
    *,
    entities: Sequence[Sequence[tuple[str, str]]] | None = None,
    n_blind: int = 20,
    n_boot: int = 2000,
    level: float = 0.95,
    n_examples: int = 3,
    rng: Any = 0,
) -> ReconstructionReport:
    """BLEU, token F1 and entity recovery of ``reconstructions``, and of the blind pairing.

    Parameters
    ----------
    texts, reconstructions : sequences of str, same length n >= 2
    entities : sequence (length n) of sequences of (type, string), optional
        The entities each text holds (e.g. ``[("PERSON", "Jane Doe"), ("AGE", "45")]``).
    n_blind : int, default 20
        Random derangements averaged for the blind scores.
    n_boot : int, default 2000
        Bootstrap resamples of the texts for the excess intervals.
    level : float, default 0.95
    rng : int, Generator or None, default 0
        Draws the derangements and the bootstrap (a fixed default: the report is a function of
        its inputs).

    Examples
    --------
    >>> t = ["ann has flu", "bob has gout", "cy is well", "dee has acne"]
    >>> r = score_against_blind(t, t, entities=[[("PERSON", w.split()[0])] for w in t])
    >>> r.token_f1, r.entity_recovery, r.entity_recovery_blind
    (1.0, 1.0, 0.0)
    """
    texts, recs = _check_pairs(texts, reconstructions)
    n = len(texts)
    n_blind = check_int("n_blind", n_blind, ge=1)
    n_boot = check_int("n_boot", n_boot, ge=1)
    level = check_real("level", level, gt=0, lt=1)
    gen = as_generator(rng)
    ents = [[] for _ in range(n)] if entities is None else [list(e) for e in entities]
    if len(ents) != n:
        raise DataError(f"entities has {len(ents)} entries but texts has {n}.")
    perms = [derangement(n, gen) for _ in range(n_blind)]
    f1 = token_f1(texts, recs)
    f1_blind = np.mean([token_f1(texts, [recs[j] for j in p]) for p in perms], axis=0)
    hits = entity_hits(ents, recs)
    blind_hits = [entity_hits(ents, [recs[j] for j in p]) for p in perms]
    count = np.array([len(e) for e in ents], dtype=np.float64)
    own = np.array([sum(h) for h in hits], dtype=np.float64)
    blind = np.mean([[sum(h) for h in bh] for bh in blind_hits], axis=0)
    idx = gen.integers(0, n, size=(n_boot, n))
    q = [(1 - level) / 2, (1 + level) / 2]
    f1_lo, f1_hi = np.quantile((f1 - f1_blind)[idx].mean(axis=1), q)
    n_ent = int(count.sum())
    if n_ent:
        e_lo, e_hi = np.quantile(_boot(own - blind, count, idx), q)
    else:
        e_lo = e_hi = float("nan")
    per_type = _entity_types(ents, hits, blind_hits, idx, q)
    exact = float(np.mean([_toks(t) == _toks(r) for t, r in zip(texts, recs, strict=True)]))
    return ReconstructionReport(
        bleu=corpus_bleu(texts, recs),
        bleu_blind=float(np.mean([corpus_bleu(texts, [recs[j] for j in p]) for p in perms])),
        token_f1=float(f1.mean()),
        token_f1_blind=float(f1_blind.mean()),
        token_f1_excess_interval=(float(f1_lo), float(f1_hi)),
        entity_recovery=float(own.sum() / n_ent) if n_ent else float("nan"),
        entity_recovery_blind=float(blind.sum() / n_ent) if n_ent else float("nan"),
        entity_excess_interval=(float(e_lo), float(e_hi)),
        entities=per_type,
        exact_match=exact,
        n_texts=n,
        n_entities=n_ent,
        examples=[
            {"text": t, "reconstruction": r}
            for t, r in list(zip(texts, recs, strict=True))[:n_examples]
        ],
    )


@dataclass(frozen=True)
class StrengthCheck:
    """Whether an inversion attack is strong enough for its results to be evidence.

    ``verdict`` is ``"evidence"`` when, on clean held-out vectors, the lower end of the 95%
    interval of its token-F1 excess over the blind pairing is above ``min_excess``; otherwise
    ``"no evidence"``: an attack that cannot invert clean vectors says nothing about protected
    ones.
    """

    verdict: str
    min_excess: float
    token_f1: float
    token_f1_blind: float
    excess_interval: tuple[float, float]
    n_texts: int

    @property
    def is_evidence(self) -> bool:
        return self.verdict == "evidence"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["excess_interval"] = list(self.excess_interval)
        return d


def strength_verdict(report: ReconstructionReport, min_excess: float = 0.05) -> StrengthCheck:
    """:class:`StrengthCheck` of a report on *clean* vectors.

    Examples
    --------
    >>> from privembed.attacks.reconstruction import score_against_blind
    >>> t = ["ann has flu", "bob has gout", "cy is well", "dee has acne"] * 5
    >>> strength_verdict(score_against_blind(t, t)).verdict
    'evidence'
    >>> strength_verdict(score_against_blind(t, ["the patient is well"] * 20)).verdict
    'no evidence'
    """
    min_excess = check_real("min_excess", min_excess, ge=0, lt=1)
    lo, hi = report.token_f1_excess_interval
    return StrengthCheck(
        verdict="evidence" if lo > min_excess else "no evidence",
        min_excess=min_excess,
        token_f1=report.token_f1,
        token_f1_blind=report.token_f1_blind,
        excess_interval=(lo, hi),
        n_texts=report.n_texts,
    )
