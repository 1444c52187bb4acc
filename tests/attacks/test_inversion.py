"""Sentence inversion: the GEIA-style decoder, the reconstruction scores, and the vec2text adapter
(exercised offline with a stand-in module: no vec2text weights exist here)."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import (
    GEIAAttack,
    Vec2TextAdapter,
    WordVocabulary,
    score_reconstructions,
    sentence_tokens,
)

from .conftest import bow_corpus

SMALL: dict[str, Any] = {"emb_dim": 16, "hidden": 48, "epochs": 25, "lr": 1e-2}


def test_score_reconstructions_hand_computed():
    r = score_reconstructions(
        ["Tom Lee has flu.", "Ann is fine."],
        ["tom has a cold.", "ann is fine."],
        sensitive=[{"tom", "lee", "flu"}, {"ann"}],
        blind="the patient has flu.",
    )
    assert r.leakage == pytest.approx(2 / 4)  # tom, ann of tom, lee, flu, ann
    assert r.leakage_chance == pytest.approx(1 / 4)  # the blind sentence recovers "flu"
    assert r.exact_match == 0.5
    # word sets: true {tom, lee, has, flu} {ann, is, fine}; predicted {tom, has, a, cold} {ann, is, fine}
    assert r.precision == pytest.approx(5 / 7) and r.recall == pytest.approx(5 / 7)
    with pytest.raises(DataError, match="2 entries but reconstructions has 1"):
        score_reconstructions(["a", "b"], ["a"])


def test_vocabulary_round_trip():
    v = WordVocabulary.build([sentence_tokens("A b, a.")])
    ids = v.encode(sentence_tokens("a b c"), max_len=4)
    assert v.decode(ids) == ["a", "b", "<unk>"]


def test_decoder_beats_chance_on_unprotected():
    texts, X = bow_corpus(500, seed=4)
    a = GEIAAttack(**SMALL).fit(texts[:400], X[:400], rng=0)
    r = a.score(texts[400:], X[400:])
    assert r.leakage > 0.6 > r.leakage_chance
    assert a.score(texts[400:440], X[400:440], beam=3).leakage > 0.6


def test_decoder_is_reproducible():
    texts, X = bow_corpus(60, seed=5)
    kw = {**SMALL, "epochs": 2}
    a = GEIAAttack(**kw).fit(texts, X, rng=3).reconstruct(X[:10])
    assert a == GEIAAttack(**kw).fit(texts, X, rng=3).reconstruct(X[:10])
    done: list[int] = []  # progress reporting changes nothing
    assert a == GEIAAttack(**kw).fit(texts, X, rng=3, on_epoch=done.append).reconstruct(X[:10])
    assert done == [1, 2]


@pytest.mark.slow
def test_decoder_on_independent_vectors_does_no_better_than_blind():
    texts, _ = bow_corpus(500, seed=4)
    Z = np.random.default_rng(3).standard_normal((500, 48))
    r = GEIAAttack(**SMALL).fit(texts[:400], Z[:400], rng=0).score(texts[400:], Z[400:])
    # each word is in 1/8 of the texts, so both rates are binomial proportions near p = 1/8 over
    # the same 300 sensitive occurrences: their difference has standard deviation at most
    # sqrt(2 p (1 - p) / 300) = 0.027; 4.4 of them (seeds 3-5 x 0-1 measured: -0.023 to +0.010)
    p = 1 / 8
    assert r.leakage < r.leakage_chance + 4.4 * np.sqrt(2 * p * (1 - p) / 300)


def test_errors():
    with pytest.raises(RuntimeError, match="not fitted"):
        GEIAAttack().reconstruct(np.ones((1, 3)))
    with pytest.raises(DataError, match="2 rows but texts has 1"):
        GEIAAttack(**SMALL).fit(["a"], np.ones((2, 3)))


# ---- vec2text ---------------------------------------------------------------------------------


def _fake_vec2text(calls):
    mod: Any = types.ModuleType("vec2text")

    class Model:
        def __init__(self, name):
            self.name = name

        @classmethod
        def from_pretrained(cls, name, **kw):
            calls.append((cls.__name__, name, kw))
            return cls(name)

    class InversionModel(Model):
        pass

    class CorrectorEncoderModel(Model):
        pass

    mod.models = types.SimpleNamespace(
        InversionModel=InversionModel, CorrectorEncoderModel=CorrectorEncoderModel
    )

    def load_corrector(inv, cor):
        calls.append(("load_corrector", inv.name, cor.name))
        return ("corrector", inv.name, cor.name)

    def invert_embeddings(embeddings, corrector, num_steps=None, sequence_beam_width=0):
        calls.append(("invert", tuple(embeddings.shape), str(embeddings.dtype), num_steps))
        return ["ann has flu"] * embeddings.shape[0]

    mod.load_corrector = load_corrector
    mod.invert_embeddings = invert_embeddings
    return mod


def test_vec2text_missing_gives_an_actionable_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vec2text", None)
    with pytest.raises(ImportError, match="pip install vec2text"):
        Vec2TextAdapter.from_pretrained("gtr-base")


def test_vec2text_loading_code_paths_offline(monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "vec2text", _fake_vec2text(calls))
    ad = Vec2TextAdapter.from_pretrained("gtr-base", num_steps=5)
    assert calls[:3] == [
        ("InversionModel", "jxm/gtr__nq__32", {"local_files_only": True}),
        ("CorrectorEncoderModel", "jxm/gtr__nq__32__correct", {"local_files_only": True}),
        ("load_corrector", "jxm/gtr__nq__32", "jxm/gtr__nq__32__correct"),
    ]
    assert ad.dim == 768
    r = ad.score(["Ann has flu.", "Bob"], np.ones((2, 768)), sensitive=[{"ann", "flu"}, {"bob"}])
    assert calls[-1] == ("invert", (2, 768), "torch.float32", 5)
    assert r.leakage == pytest.approx(2 / 3)
    with pytest.raises(DataError, match="inverts 768-d"):
        ad.reconstruct(np.ones((1, 384)))
    with pytest.raises(ValueError, match="embedder must be one of"):
        Vec2TextAdapter.from_pretrained("all-MiniLM-L6-v2")
    local = Vec2TextAdapter.from_local("/models/inv", "/models/cor", local_files_only=True)
    assert local.corrector == ("corrector", "/models/inv", "/models/cor") and local.dim is None
    with pytest.raises(ValueError, match="needs num_steps"):
        Vec2TextAdapter(None, num_steps=None, sequence_beam_width=2)
