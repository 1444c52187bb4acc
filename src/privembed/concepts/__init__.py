"""Concept-aware protection (SPARSE, [T26]): learn which embedding dimensions carry a concept,
save them as a concept profile, and protect them with elliptical (Mahalanobis) noise.

The pipeline, from "protect diseases" to protected vectors::

    from . import builtin_concept, generate_sentences, learn_profile
    concept = builtin_concept("disease")
    profile = learn_profile(generate_sentences("disease", 2000, rng=0), concept, rng=0)
    profile.save("disease.profile")
    mech = profile.mechanism(epsilon=10.0)         # MahalanobisMechanism with the mask
    Y = mech.privatize(X, rng=None)

Modules: :mod:`~privembed.concepts.sources` (concept definitions, seeded sentence generators),
:mod:`~privembed.concepts.pairs` (D+/D- pairs, R(s, C)), :mod:`~privembed.concepts.masks`
(hard-concrete mask learning, eqs. 1-5), :mod:`~privembed.concepts.sensitivity` (Def. 7 and the
top/bottom diagnostic), :mod:`~privembed.concepts.profile` (the saved artefact) and
:mod:`~privembed.concepts.cache` (embeddings computed once); :mod:`~privembed.concepts.erasure`
(LEACE concept erasure, stored beside a profile). Mask learning needs the ``learn``
extra (torch); built-in concepts and entity labels need the ``data`` extra (Faker, spaCy).

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE).
"""

from __future__ import annotations

from .cache import embed_texts
from .erasure import ConceptEraser, eraser_path, load_eraser
from .masks import (
    GAMMA,
    XI,
    MaskLearner,
    MaskResult,
    deterministic_mask,
    expected_l0,
    gate_probabilities,
    hard_concrete_sample,
    learn_mask,
)
from .pairs import ConceptMatcher, PairSet, build_pairs, remove_concept
from .profile import PROFILE_FORMAT, ConceptProfile, learn_profile
from .sensitivity import SensitivityDiagnostic, neuron_sensitivity, sensitivity_diagnostic
from .sources import (
    BUILTIN_CONCEPTS,
    Concept,
    builtin_concept,
    generate_sentences,
    read_tokens,
    resolve_concept,
)

__all__ = [
    "BUILTIN_CONCEPTS",
    "GAMMA",
    "PROFILE_FORMAT",
    "XI",
    "Concept",
    "ConceptEraser",
    "ConceptMatcher",
    "ConceptProfile",
    "MaskLearner",
    "MaskResult",
    "PairSet",
    "SensitivityDiagnostic",
    "build_pairs",
    "builtin_concept",
    "deterministic_mask",
    "embed_texts",
    "eraser_path",
    "expected_l0",
    "gate_probabilities",
    "generate_sentences",
    "hard_concrete_sample",
    "learn_mask",
    "learn_profile",
    "load_eraser",
    "neuron_sensitivity",
    "read_tokens",
    "remove_concept",
    "resolve_concept",
    "sensitivity_diagnostic",
]
