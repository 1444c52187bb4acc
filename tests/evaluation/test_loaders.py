"""Evaluation data loaders: gensim's bundled data, PII templates, MTEB folders (offline fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privembed import DataError
from privembed.evaluation.loaders import (
    TEMPLATES,
    lee_background,
    lee_corpus,
    load_mteb_retrieval,
    load_mteb_sts,
    pii_sentences,
    word_similarity,
)

DATA = Path(__file__).parent / "data"


def test_lee_corpus_matches_gensims_own_test():
    lee = lee_corpus()
    assert len(lee.documents) == 50 and lee.pairs.shape == (1225, 2)
    S = np.loadtxt(Path(lee_corpus.__globals__["gensim_data_dir"]()) / "similarities0-1.txt")
    # gensim's test_lee takes the strict upper triangle in the same order
    np.testing.assert_array_equal(lee.scores, S[np.triu_indices(50, 1)])
    assert (lee.pairs[:, 0] < lee.pairs[:, 1]).all()
    assert lee.sts_task().scores.size == 1225
    assert "Democrats" in lee.documents[0]
    assert len(lee_background()) == 300


def test_word_similarity_task_coverage():
    ws = word_similarity("wordsim353")
    vocab = sorted({*ws.word1[:50], *ws.word2[:50]})
    task, coverage = ws.sts_task(vocab)
    assert 50 / 353 <= coverage < 1
    triples = set(zip(ws.word1, ws.word2, ws.scores.tolist(), strict=True))
    for (a, b), s in zip(task.pairs, task.scores, strict=True):
        assert (vocab[a], vocab[b], s) in triples
    pairs = zip(ws.word1, ws.word2, strict=True)
    assert len(task.scores) == sum(a in vocab and b in vocab for a, b in pairs)
    with pytest.raises(ValueError, match="name must be one of"):
        word_similarity("men")


def test_pii_sentences_ground_truth():
    c = pii_sentences(200, seed=3, templates=TEMPLATES)
    assert c.source == "custom" and len(c) == 200
    for text, spans, sens in zip(c.texts, c.entities, c.sensitive, strict=True):
        assert spans
        for start, end, _kind, value in spans:
            assert text[start:end] == value
        assert sens  # every template has a slot with a word in it
        assert "{{" not in text and "}}" not in text
    kinds = {k for spans in c.entities for _, _, k, _ in spans}
    assert {"PERSON", "LOCATION", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD"} <= kinds
    a, b = pii_sentences(20, seed=1), pii_sentences(20, seed=1)
    assert a == b and a != pii_sentences(20, seed=2)
    corpus = a.to_attack_corpus()
    assert corpus.texts == a.texts and corpus.sensitive == a.sensitive


def test_pii_templates_in_presidio_format(tmp_path):
    f = tmp_path / "templates.txt"
    f.write_text(
        "I'm originally from {{country}}\n"
        "No slot here at all.\n"
        "My {{nation_woman}} friend\n"  # a slot without a generator: skipped
        "Call {{person}} on {{phone_number}}\n"
    )
    c = pii_sentences(30, seed=0, templates=f)
    assert c.skipped_templates == 2
    assert set(c.template_ids) == {0, 3}
    with pytest.raises(FileNotFoundError, match="templates file not found"):
        pii_sentences(3, templates=tmp_path / "missing.txt")
    with pytest.raises(DataError, match="no usable template"):
        pii_sentences(3, templates=["{{nope}}"])


def test_mteb_sts_jsonl_gz_fixture():
    t = load_mteb_sts(DATA / "mteb_sts12")
    assert len(t) == 5 and t.name == "mteb_sts12"
    assert t.sentences1[0] == "A man is playing a guitar." and t.scores[0] == 4.8
    texts, task = t.sts_task()
    assert texts[task.pairs[2, 0]] == t.sentences1[2] and texts[task.pairs[2, 1]] == t.sentences2[2]
    with pytest.raises(FileNotFoundError, match="no 'train' split"):
        load_mteb_sts(DATA / "mteb_sts12", split="train")


def test_mteb_sts_parquet_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    rows = [
        {"sentence1": "a", "sentence2": "b", "score": 1.0},
        {"sentence1": "c", "sentence2": "d", "score": 2.5},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "test-00000-of-00001.parquet")
    t = load_mteb_sts(tmp_path)
    assert t.sentences2 == ["b", "d"] and t.scores.tolist() == [1.0, 2.5]


def test_mteb_retrieval_beir_fixture():
    t = load_mteb_retrieval(DATA / "mteb_fiqa")
    assert t.doc_ids == ["d1", "d2", "d3", "d4", "d5"]
    assert t.doc_texts[0] == "Index funds Index funds track a market index at low cost."
    assert t.doc_texts[1] == "A bond pays a fixed coupon until maturity."  # no title
    assert t.query_ids == ["q1", "q2", "q3"]  # q9 has no judgment in the split
    assert t.qrels == {"q1": {"d1": 1.0}, "q2": {"d4": 1.0}, "q3": {"d5": 1.0, "d2": 1.0}}


def test_mteb_retrieval_parquet_and_jsonl_qrels(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for sub in ("corpus", "queries", "qrels"):
        (tmp_path / sub).mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"_id": "x", "title": "", "text": "doc x"}]),
        tmp_path / "corpus" / "corpus-00000.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist([{"_id": "q", "text": "query q"}]),
        tmp_path / "queries" / "queries-00000.parquet",
    )
    (tmp_path / "qrels" / "test.jsonl").write_text(
        json.dumps({"query-id": "q", "corpus-id": "x", "score": 2}) + "\n"
    )
    t = load_mteb_retrieval(tmp_path)
    assert (
        t.doc_texts == ["doc x"] and t.query_texts == ["query q"] and t.qrels == {"q": {"x": 2.0}}
    )


def test_hub_names_go_through_snapshot_download(monkeypatch):
    import huggingface_hub

    calls = {}

    def fake_download(**kw):
        calls.update(kw)
        return str(DATA / "mteb_sts12")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    t = load_mteb_sts("mteb/sts12-sts", revision="a0d554a64d88156834ff5ae9920b964011b16384")
    assert len(t) == 5 and t.name == "sts12-sts"
    assert calls["repo_id"] == "mteb/sts12-sts" and calls["repo_type"] == "dataset"
    assert calls["revision"].startswith("a0d554a")
    assert "test.jsonl.gz" in calls["allow_patterns"]

    def offline(**kw):
        raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="cannot download 'mteb/fiqa' from the hub"):
        load_mteb_retrieval("mteb/fiqa")
    with pytest.raises(FileNotFoundError, match="neither a local folder"):
        load_mteb_sts("sts12")
