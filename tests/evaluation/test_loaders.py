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


# ---- GCIDE retrieval task (tiny dictd-format fixture in data/gcide) ----------------------------

GCIDE = DATA / "gcide"


def test_gcide_documents_are_definitions_without_quotes_notes_or_tags():
    from privembed.evaluation.loaders import MTEBRetrieval, gcide_retrieval

    task = gcide_retrieval(GCIDE, split="all")
    assert isinstance(task, MTEBRetrieval) and task.name == "gcide-all"
    docs = dict(zip(task.doc_ids, task.doc_texts, strict=True))
    assert docs["Accrue#1.1"] == "To increase; to augment."
    # the document never names its headword: its own forms are masked
    assert docs["Accrue#2.0"] == "Something that ___; advantage ___. [Obs.]"
    # ... but only forms: "cavern" is not a form of "cave"
    assert docs["Cave#1.0"].endswith("a subterraneous cavern; a den.")
    # accent code [ae] -> ae, braces and the source tag removed
    assert docs["Lark#1.0"].endswith("genus Alauda, of the family Alaudidae.")
    assert docs["Lark#1.1"].startswith("(Zool.), a fringilline bird")
    text = " ".join(task.doc_texts)
    for gone in ("Webster", "WordNet", "Note:", "skylark", "Syn:", "rubicund", "heaven's gate",
                 "Spenser", "[imp.", "\\Ac*crue", "Lark bunting", "accru"):  # fmt: skip
        assert gone not in text
    # index entries that point into the same article ("Accrued", "It accrues") add nothing
    assert len(task.doc_ids) == len(set(task.doc_ids)) == 9
    assert all(not i.startswith(("Accrued", "It accrues")) for i in task.doc_ids)
    # mask="query": the document is "<headword>: <definition>"
    q_task = gcide_retrieval(GCIDE, split="all", mask="query")
    assert q_task.doc_texts[0] == "Accrue: To increase; to augment."
    assert q_task.doc_ids == task.doc_ids
    with pytest.raises(ValueError, match="mask must be one of"):
        gcide_retrieval(GCIDE, mask="both")


def test_gcide_queries_point_at_the_illustrated_sense():
    from privembed.evaluation.loaders import gcide_retrieval

    task = gcide_retrieval(GCIDE, split="all")
    q = dict(zip(task.query_texts, task.query_ids, strict=True))
    # sense 1 vs sense 2 of the same article; the attribution is cut, the word kept
    assert task.qrels[q["And though power failed, her courage did accrue."]] == {"Accrue#1.1": 1.0}
    adv = "The great and essential advantages accruing to society from the freedom of the press."
    assert task.qrels[q[adv]] == {"Accrue#1.2": 1.0}
    assert "Hark, hark! the lark at heaven's gate sings." in q
    # "Interest accrued." (2 words) is too short; "Not a mouse stirring." has 4
    assert len(task.query_ids) == 7 and "Not a mouse stirring." in q
    assert {d for r in task.qrels.values() for d in r} <= set(task.doc_ids)
    assert len(gcide_retrieval(GCIDE, split="all", min_words=9).query_ids) == 4
    assert len(gcide_retrieval(GCIDE, split="all", max_words=8).query_ids) == 3


def test_gcide_mask_query_hides_every_listed_form():
    from privembed.evaluation.loaders import gcide_retrieval

    task = gcide_retrieval(GCIDE, split="all", mask="query")
    q = set(task.query_texts)
    assert "And though power failed, her courage did ___." in q
    assert "The great and essential advantages ___ to society from the freedom of the press." in q
    assert "The ___ ran about in the granary all the night long." in q  # "pl. {Mice}"
    assert "The ___ of the village stood along one narrow street." in q  # stem "hous" + "es"
    assert "They did square, and carve, and pollish fine stones in the ___." in q
    # masked words do not count: "Not a ___ stirring." has 3 words left
    assert len(task.query_ids) == 6
    assert all("accru" not in t.lower() for t in task.query_texts)


def test_gcide_splits_are_by_headword_and_share_the_corpus():
    from privembed.evaluation.loaders import gcide_retrieval, gcide_split

    tasks = {s: gcide_retrieval(GCIDE, split=s) for s in ("train", "dev", "test")}
    assert [len(t.query_ids) for t in tasks.values()] == [5, 1, 1]
    assert tasks["dev"].query_ids == ["q:Cave#1.0:0"]
    assert tasks["test"].query_ids == ["q:House#1.1:0"]
    assert len({tuple(t.doc_ids) for t in tasks.values()}) == 1  # one corpus
    for s, t in tasks.items():
        assert all(gcide_split(qid[2:].split("#")[0]) == s for qid in t.query_ids)
    # the rule is 60/20/20 by a hash: shares over 20,000 synthetic headwords within 4.4
    # binomial standard errors (sqrt(0.24 / 20000) = 0.0035 -> 0.015)
    words = [f"word{i}" for i in range(20_000)]
    share = {s: sum(gcide_split(w) == s for w in words) / len(words) for s in tasks}
    for s, p in (("train", 0.6), ("dev", 0.2), ("test", 0.2)):
        assert abs(share[s] - p) < 0.015, (s, share[s])
    assert gcide_split("HOUSE") == gcide_split(" house ") == "test"
    with pytest.raises(ValueError, match="split must be one of"):
        gcide_retrieval(GCIDE, split="validation")


def test_gcide_max_queries_is_a_deterministic_sample():
    from privembed.evaluation.loaders import gcide_retrieval

    a = gcide_retrieval(GCIDE, split="all", max_queries=3)
    b = gcide_retrieval(GCIDE, split="all", max_queries=3)
    assert a == b and len(a.query_ids) == 3 and set(a.qrels) == set(a.query_ids)
    assert set(a.query_ids) < set(gcide_retrieval(GCIDE, split="all").query_ids)


def test_gcide_finds_dz_files_env_var_and_explains_missing_data(tmp_path, monkeypatch):
    import gzip
    import shutil

    from privembed.evaluation.loaders import GCIDE_ENV, gcide_retrieval

    plain = gcide_retrieval(GCIDE, split="all")
    shutil.copy(GCIDE / "gcide.index", tmp_path / "gcide.index")
    (tmp_path / "gcide.dict.dz").write_bytes(gzip.compress((GCIDE / "gcide.dict").read_bytes()))
    assert gcide_retrieval(tmp_path, split="all") == plain
    assert gcide_retrieval(tmp_path / "gcide.index", split="all") == plain
    monkeypatch.setenv(GCIDE_ENV, str(tmp_path))
    assert gcide_retrieval(split="all") == plain
    monkeypatch.setenv(GCIDE_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"PRIVEMBED_GCIDE=.*apt-get download dict-gcide"):
        gcide_retrieval()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "gcide.dict").write_bytes(b"x\n")
    (bad / "gcide.index").write_text("Word\tA\n")
    with pytest.raises(DataError, match="line 1 is not 'headword<TAB>offset<TAB>length'"):
        gcide_retrieval(bad)
    (bad / "gcide.index").write_text("Word\tA\tZZ\n")
    with pytest.raises(DataError, match="points past the end"):
        gcide_retrieval(bad)
    (bad / "gcide.index").write_text("Word\tA\t!\n")
    with pytest.raises(DataError, match="bad base64"):
        gcide_retrieval(bad)


def test_retrieval_subset_keeps_every_relevant_document_and_a_fixed_sample():
    from privembed.evaluation.loaders import MTEBRetrieval

    docs = [f"d{i}" for i in range(100)]
    task = MTEBRetrieval(
        name="t",
        doc_ids=docs,
        doc_texts=[f"text {i}" for i in range(100)],
        query_ids=["q1", "q2"],
        query_texts=["a", "b"],
        qrels={"q1": {"d97": 1.0}, "q2": {"d3": 1.0, "d50": 1.0}},
    )
    sub = task.subset(10)
    assert len(sub.doc_ids) == 10 and {"d97", "d3", "d50"} <= set(sub.doc_ids)
    assert sub.doc_ids == sorted(sub.doc_ids, key=docs.index)  # corpus order
    assert sub.doc_texts == [f"text {d[1:]}" for d in sub.doc_ids]
    assert task.subset(10).doc_ids == sub.doc_ids  # deterministic
    assert task.subset(None) is task and task.subset(1000) is task
    assert len(task.subset(2).doc_ids) == 3  # never drops a relevant document


def test_cli_evaluate_on_the_gcide_task(tmp_path):
    """evaluate --task gcide embeds the task (real model) and reports NDCG@10 of plain queries
    over every protected corpus, for the split asked for."""
    import csv

    from typer.testing import CliRunner

    from privembed.cli import app

    fixture = Path(__file__).parent / "data" / "gcide"
    out = tmp_path / "rep"
    r = CliRunner().invoke(
        app,
        ["evaluate", "--task", "gcide", "--task-path", str(fixture), "--task-split", "test",
         "-o", str(out), "--mechanisms", "laplace", "--epsilon", "50,5000", "--runs", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    ndcg = {row["label"]: float(row["mean"]) for row in rows if row["metric"] == "ndcg@10"}
    assert set(ndcg) == {"laplace(epsilon=50)", "laplace(epsilon=5000)"}
    assert ndcg["laplace(epsilon=5000)"] >= ndcg["laplace(epsilon=50)"]
    assert "gcide, test split: 1 queries over 9 of 9 documents" in (out / "index.html").read_text()
    r = CliRunner().invoke(app, ["evaluate", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "give the embeddings (INPUT) or --task" in r.output
