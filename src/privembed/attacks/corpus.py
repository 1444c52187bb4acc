"""A PII corpus with ground truth for the token attacks: synthetic clinical notes (templates + Faker).

Each note of :func:`privembed.data.datasets.synthetic_clinical_notes` records its sensitive values
(name, age, city, disease, symptom, drug); their lower-cased word tokens, minus a few function
words, are the note's *sensitive tokens* -- what Leakage ([T26] eq. 13) counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._common import word_tokens

__all__ = ["FUNCTION_WORDS", "SENSITIVE_FIELDS", "PIICorpus", "pii_corpus", "sensitive_tokens"]

#: fields of a :class:`~privembed.data.datasets.ClinicalNote` that hold personal information
SENSITIVE_FIELDS = ("name", "age", "city", "disease", "symptom", "drug")
#: words inside sensitive values that carry no personal information by themselves
FUNCTION_WORDS = frozenset(
    {"a", "an", "and", "at", "by", "for", "from", "in", "of", "on", "or", "the", "to", "with"}
)


def sensitive_tokens(note: Any, fields: tuple[str, ...] = SENSITIVE_FIELDS) -> frozenset[str]:
    """Lower-cased word tokens of the sensitive values that occur in a note's text.

    A note records every field, but not every template prints every one (some have no city);
    only values found in the text count, and function words inside them are dropped.

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> n = NS(text="Ann Lee, 40, has loss of smell.", name="Ann Lee", age=40, city="Lake Ann",
    ...        disease="Flu", symptom="loss of smell", drug="X")
    >>> sorted(sensitive_tokens(n))
    ['40', 'ann', 'lee', 'loss', 'smell']
    """
    text = " ".join(word_tokens(note.text))
    out: set[str] = set()
    for f in fields:
        words = word_tokens(str(getattr(note, f)))
        if words and f" {' '.join(words)} " in f" {text} ":
            out.update(words)
    return frozenset(out - FUNCTION_WORDS)


@dataclass(frozen=True)
class PIICorpus:
    """Texts, their ids and their sensitive tokens (aligned lists)."""

    ids: list[str]
    texts: list[str]
    sensitive: list[frozenset[str]]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: Any) -> PIICorpus:
        idx = [int(i) for i in index]
        return PIICorpus(
            ids=[self.ids[i] for i in idx],
            texts=[self.texts[i] for i in idx],
            sensitive=[self.sensitive[i] for i in idx],
        )


def pii_corpus(n: int = 2000, *, seed: int = 0) -> PIICorpus:
    """``n`` seeded synthetic clinical notes with their sensitive tokens (extra ``data``).

    Examples
    --------
    >>> c = pii_corpus(2, seed=1)
    >>> len(c), c.ids[0], "modafinil" in c.sensitive[1] or len(c.sensitive[1]) > 3
    (2, 'note-00000', True)
    """
    from ..data.datasets import synthetic_clinical_notes

    notes = synthetic_clinical_notes(n, seed=seed)
    return PIICorpus(
        ids=[nt.id for nt in notes],
        texts=[nt.text for nt in notes],
        sensitive=[sensitive_tokens(nt) for nt in notes],
    )
