"""Scores of reconstructed sentences: BLEU, token F1, entity recovery, the blind pairing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks.reconstruction import (
    corpus_bleu,
    derangement,
    entity_hits,
    score_against_blind,
    token_f1,
)


def test_bleu_hand_computed():
    # one pair: clipped precisions 5/6, 3/5, 2/4, 1/3; equal lengths -> brevity penalty 1
    ref, cand = "the cat sat on the mat", "the cat sat on a mat"
    want = (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert corpus_bleu([ref], [cand]) == pytest.approx(want)
    # clipping: "the the the" against "the cat" counts "the" once; bigrams: none -> 0
    assert corpus_bleu(["the cat"], ["the the the"], order=1) == pytest.approx(1 / 3)
    # brevity penalty exp(1 - r/c) for a short candidate (unigram BLEU: precision 1)
    assert corpus_bleu(["a b c d"], ["a b"], order=1) == pytest.approx(math.exp(1 - 4 / 2))
    # pooled over the corpus, not averaged per sentence
    two = corpus_bleu(["a b", "c d"], ["a b", "c x"], order=1)
    assert two == pytest.approx(3 / 4)
    assert corpus_bleu(["x"], [""]) == 0.0


def test_token_f1_and_entities():
    f = token_f1(["Jane Doe has flu", "x y"], ["jane has a cold", "q"])
    assert f.tolist() == pytest.approx([2 * 2 / (4 + 4), 0.0])
    hits = entity_hits(
        [[("PERSON", "Jane Doe"), ("AGE", "45"), ("DISEASE", "Type 2 Diabetes")]],
        ["doe jane, 45 years, type 2 diabetes"],
    )
    assert hits == [[False, True, True]]  # order matters for a multi-word entity
    assert entity_hits([[("X", "...")]], ["..."]) == [[False]]  # no word token: never recovered
    with pytest.raises(DataError, match=r"entities\[0\] must hold \(type, string\) pairs"):
        entity_hits([["Jane"]], ["jane"])


def test_derangement_has_no_fixed_point_and_is_uniform_enough():
    gen = np.random.default_rng(0)
    first = np.array([derangement(4, gen)[0] for _ in range(3000)])
    # the image of 0 is uniform on {1, 2, 3}: chi-square with 2 df, 0.1% critical value 13.8
    counts = np.bincount(first, minlength=4)
    assert counts[0] == 0
    chi2 = ((counts[1:] - 1000) ** 2 / 1000).sum()
    assert chi2 < 13.8
    with pytest.raises(ValueError, match="n"):
        derangement(1)


def test_blind_pairing_removes_what_a_constant_answer_gets():
    texts = [f"patient {n} has flu" for n in ("ann", "bob", "cy", "dee", "eve", "fay")] * 5
    const = ["patient has flu"] * len(texts)
    r = score_against_blind(texts, const, entities=[[("DISEASE", "flu")]] * len(texts))
    # a constant answer scores the same against its own text and another one: no excess
    assert r.token_f1 == pytest.approx(r.token_f1_blind)
    assert r.entity_recovery == 1.0 == r.entity_recovery_blind
    assert r.entity_excess_interval == (0.0, 0.0)
    assert not r.beats_blind()
    own = score_against_blind(texts, texts, entities=[[("P", t.split()[1])] for t in texts])
    assert own.token_f1 == 1.0 and own.exact_match == 1.0 and own.beats_blind(min_excess=0.15)
    assert own.entities["P"].recovered == 1.0 and own.entities["P"].excess_low > 0.5
    assert own.bleu == pytest.approx(1.0) and own.bleu_blind < 1.0


def test_report_is_a_function_of_its_inputs_and_rng():
    texts = ["a b c", "d e f", "a e x", "q r s"] * 4
    recs = ["a b", "d f", "x", "q"] * 4
    ents = [[("W", t.split()[0])] for t in texts]
    r1 = score_against_blind(texts, recs, entities=ents)
    assert r1 == score_against_blind(texts, recs, entities=ents)
    r5 = score_against_blind(texts, recs, entities=ents, rng=5)
    assert r5.token_f1 == r1.token_f1 and r5.entity_recovery == r1.entity_recovery
    # no entities: the entity scores are NaN, not 0
    assert np.isnan(score_against_blind(texts, recs).entity_recovery)


def test_bad_inputs():
    with pytest.raises(DataError, match="2 entries but reconstructions has 1"):
        score_against_blind(["a", "b"], ["a"])
    with pytest.raises(DataError, match=">= 2 texts"):
        score_against_blind(["a"], ["a"])
    with pytest.raises(TypeError, match=r"reconstructions\[1\]"):
        score_against_blind(["a", "b"], ["a", None])  # type: ignore[list-item]
    with pytest.raises(DataError, match="entities has 1 entries"):
        score_against_blind(["a", "b"], ["a", "b"], entities=[[]])
    with pytest.raises(ValueError, match="n_blind"):
        score_against_blind(["a", "b"], ["a", "b"], n_blind=0)
    with pytest.raises(DataError, match="references has 1"):
        corpus_bleu(["a"], [])
