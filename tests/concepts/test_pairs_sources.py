"""Concept definitions, the seeded generators, and D+/D- pair building (R(s, C))."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from privembed import DataError
from privembed.concepts import (
    BUILTIN_CONCEPTS,
    Concept,
    ConceptMatcher,
    build_pairs,
    builtin_concept,
    generate_sentences,
    read_tokens,
    remove_concept,
    resolve_concept,
)


def test_remove_concept_tokens_phrases_and_case():
    c = Concept(name="disease", tokens=("asthma", "type 2 diabetes", "flu"))
    assert remove_concept("Type 2 diabetes, asthma and FLU.", c) == "and."
    # whole words only: "influenza" does not contain the token "flu"
    assert remove_concept("influenza and flu", c) == "influenza and"
    cs = Concept(name="month", tokens=("May",), case_sensitive=True)
    assert remove_concept("You may visit in May.", cs) == "You may visit in."
    # every occurrence is removed, and spaces around punctuation are tidied
    assert remove_concept("asthma (asthma) asthma", c) == ""


def test_phrase_matching_ignores_separators_but_not_punctuation():
    m = ConceptMatcher(Concept(name="city", tokens=("New York",)))
    text = "New-York, New York and New, York"
    assert [text[s:e] for s, e in m.spans(text)] == ["New-York", "New York"]


def test_patterns_and_builtin_age_and_date():
    age = builtin_concept("age")
    assert remove_concept("A 45-year-old man, aged 50, 61 y/o, at the age of 70.", age) == (
        "A man, at the."
    )
    date = builtin_concept("date")
    assert remove_concept("Seen on March 3, 2021 and 2021-03-04, back Monday.", date) == (
        "Seen on and, back."
    )


def test_build_pairs_counts():
    c = Concept(name="drug", tokens=("aspirin", "ibuprofen"))
    texts = ["Took aspirin.", "Nothing.", "Aspirin", "Ibuprofen and aspirin daily.", "More."]
    p = build_pairs(texts, c)
    assert p.positives == ["Took aspirin.", "Ibuprofen and aspirin daily."]
    assert p.negatives == ["Took.", "and daily."]
    assert p.source_index.tolist() == [0, 3]
    assert p.summary() == {
        "concept": "drug",
        "n_texts": 5,
        "n_pairs": 2,
        "n_without_concept": 2,
        "n_empty_after_removal": 1,
        "n_spans_removed": 3,
    }
    with pytest.raises(DataError, match="non-empty"):
        build_pairs([], c)
    with pytest.raises(TypeError, match="not a single string"):
        build_pairs("Took aspirin.", c)


@pytest.mark.parametrize("name", BUILTIN_CONCEPTS)
def test_builtin_generators_are_seeded_and_always_contain_the_concept(name):
    a = generate_sentences(name, 60, rng=5)
    assert a == generate_sentences(name, 60, rng=5) and a != generate_sentences(name, 60, rng=6)
    p = build_pairs(a, builtin_concept(name))
    assert p.n_without_concept == 0 and p.n_empty_after_removal == 0 and len(p) == 60
    assert all(
        neg != pos and len(neg) < len(pos)
        for pos, neg in zip(p.positives, p.negatives, strict=True)
    )


@pytest.mark.slow
def test_generated_sentences_are_the_same_in_every_process():
    """An int seed gives the same sentences in any process (three hash seeds, three processes)."""
    code = (
        "from privembed.concepts import generate_sentences\n"
        "print(generate_sentences('disease', 20, rng=1))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (0, 1, 2)
    }
    assert len(outputs) == 1


def test_builtin_person_excludes_place_and_month_words():
    person = builtin_concept("person")
    assert "Francisco" not in person.tokens and "April" not in person.tokens
    assert remove_concept("Mary Smith moved to San Francisco.", person) == "moved to San Francisco."


def test_concept_round_trip_and_errors(tmp_path):
    c = resolve_concept("employer", tokens=["Acme Corp"], entity_labels=["org"])
    assert (
        c.entity_labels == ("ORG",) and Concept.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    )
    assert resolve_concept("disease", case_sensitive=True).case_sensitive
    with pytest.raises(ValueError, match="not built in"):
        resolve_concept("employer")
    with pytest.raises(ValueError, match="invalid regular expression"):
        Concept(name="x", patterns=("(",))
    with pytest.raises(TypeError, match="sequence of strings"):
        Concept(name="x", tokens="abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concept must be one of"):
        generate_sentences("mood", 3, rng=0)


def test_read_tokens_formats(tmp_path):
    (tmp_path / "t.txt").write_text("# diseases\nasthma\n\ngout\n")
    (tmp_path / "t.json").write_text('["asthma", "gout"]')
    (tmp_path / "t.jsonl").write_text('{"token": "asthma"}\n"gout"\n')
    for name in ("t.txt", "t.json", "t.jsonl"):
        assert read_tokens(tmp_path / name) == ["asthma", "gout"]
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(DataError, match="JSON list of strings"):
        read_tokens(tmp_path / "bad.json")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(DataError, match="no tokens"):
        read_tokens(tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError):
        read_tokens(tmp_path / "missing.txt")


@pytest.mark.slow
def test_entity_labels_with_spacy():
    import spacy  # noqa: F401 - a dev dependency: a broken install fails, never skips

    c = Concept(name="person", entity_labels=("PERSON",))
    p = build_pairs(
        ["Barack Obama visited Paris yesterday.", "The weather was fine.", "Angela Merkel spoke."],
        c,
    )
    assert p.n_without_concept == 1 and len(p) == 2
    assert "Obama" not in p.negatives[0] and "Paris" in p.negatives[0]
    assert np.array_equal(p.source_index, [0, 2])
    with pytest.raises(ValueError, match="not produced by the spaCy model"):
        ConceptMatcher(Concept(name="x", entity_labels=("NOT_A_LABEL",)))
