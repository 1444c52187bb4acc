"""Shared fixtures: the demo corpus and the PII corpus embedded with the offline MiniLM model.

Both are small (300 texts each) so that the tests that need real embeddings stay cheap; they
are embedded once per test session and only when a test asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    sensitive: list[set[str]]
    X: np.ndarray


def _embed(texts: list[str]) -> np.ndarray:
    from privembed.data.embedders import Embedder

    return np.asarray(Embedder().encode(texts))


@pytest.fixture(scope="session")
def demo_corpus() -> Corpus:
    """The demo's corpus (``privembed demo``): 300 seeded synthetic clinical notes."""
    from privembed.attacks import sensitive_tokens
    from privembed.data.datasets import synthetic_clinical_notes

    notes = synthetic_clinical_notes(300, seed=0)
    texts = [n.text for n in notes]
    return Corpus(texts, [set(sensitive_tokens(n)) for n in notes], _embed(texts))


@pytest.fixture(scope="session")
def pii_corpus_300() -> Corpus:
    """300 PII template sentences (``privembed.evaluation.loaders.pii_sentences``)."""
    from privembed.evaluation.loaders import pii_sentences

    c = pii_sentences(300, seed=0)
    texts = list(c.texts)
    return Corpus(texts, [set(s) for s in c.sensitive], _embed(texts))
