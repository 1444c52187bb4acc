"""Attacks that audit protected embeddings: every privacy claim is backed by an attack run.

============================  =================================================================
attack                        question it answers
============================  =================================================================
:class:`MLCAttack`            which words does a text contain? (token inference, [T26] App. I.3)
:class:`TemplateMatcher`,     which concept does an anisotropic mechanism protect? (variance
:class:`FingerprintClassifier`  fingerprints over repeated releases, [F26])
:func:`averaging_attack`      how much does averaging N releases of a record recover?
:class:`LinkageAttack`        which original does a protected vector come from? (= [K26] top-1
                              retrieval, from the attacker's side)
:class:`GEIAAttack`,          what was the sentence? (generative inversion: a GRU decoder; vec2text
:class:`Vec2TextAdapter`      where its pretrained correctors are available)
:class:`TransformerInversionAttack`  what was the sentence? (soft-prefix transformer decoder with
                              vec2text-style correction, adaptive, with a strength check)
:class:`AttributeProbe`       does the text mention a person, a place, a diagnosis? (probes)
============================  =================================================================

Trained attacks (token inference, fingerprint MLP, GEIA) need the ``learn`` extra (torch,
imported only when an attack is fitted); they are seeded from the ``rng`` argument
(``torch.manual_seed`` inside a forked torch random state, minibatches shuffled by numpy) and
reproducible. Metrics are in :mod:`privembed.attacks.metrics`.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE).
.. [F26] Anisotropic noise fingerprints reveal concept choice in concept-aware embedding privacy.
.. [K26] Kaliutau (2026). Privacy-utility trade-off analysis for 1920-dimensional clinical vectors.
"""

from __future__ import annotations

from . import metrics
from ._common import protect_copies, simulate_release, word_tokens
from .attribute import (
    AttributeProbe,
    AttributeReport,
    attribute_audit,
    auc_interval,
    mentions,
    ner_labels,
)
from .averaging import AveragingReport, averaging_attack, expected_average_cosine
from .base import AttackResult, ScoredReport
from .corpus import PIICorpus, pii_corpus, sensitive_tokens
from .fingerprint import (
    FingerprintClassifier,
    FingerprintReport,
    TemplateMatcher,
    l1_normalize,
    permuted_diagonal,
    release_stack,
    simulate_fingerprints,
    variance_fingerprint,
)
from .inversion import (
    GEIAAttack,
    InversionReport,
    Vec2TextAdapter,
    WordVocabulary,
    score_reconstructions,
    sentence_tokens,
)
from .linkage import LinkageAttack, LinkageReport, linkage_ranks
from .reconstruction import ReconstructionReport, score_against_blind
from .token_inference import MLCAttack, TokenInferenceReport, TokenVocabulary
from .transformer_inversion import StrengthCheck, TransformerInversionAttack

__all__ = [
    "AttackResult",
    "AttributeProbe",
    "AttributeReport",
    "AveragingReport",
    "FingerprintClassifier",
    "FingerprintReport",
    "GEIAAttack",
    "InversionReport",
    "LinkageAttack",
    "LinkageReport",
    "MLCAttack",
    "PIICorpus",
    "ReconstructionReport",
    "ScoredReport",
    "StrengthCheck",
    "TemplateMatcher",
    "TokenInferenceReport",
    "TokenVocabulary",
    "TransformerInversionAttack",
    "Vec2TextAdapter",
    "WordVocabulary",
    "attribute_audit",
    "auc_interval",
    "averaging_attack",
    "expected_average_cosine",
    "l1_normalize",
    "linkage_ranks",
    "mentions",
    "metrics",
    "ner_labels",
    "permuted_diagonal",
    "pii_corpus",
    "protect_copies",
    "release_stack",
    "score_against_blind",
    "score_reconstructions",
    "sensitive_tokens",
    "sentence_tokens",
    "simulate_fingerprints",
    "simulate_release",
    "variance_fingerprint",
    "word_tokens",
]
