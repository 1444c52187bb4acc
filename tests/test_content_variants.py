"""Variants of one text are one record on the command line and in the library (issue 39, item 2).

The attack: a note submitted in 20 variants -- case, whitespace and compatibility forms, or
zero-width characters the model's tokenizer drops -- that an uncased model embeds to one clean
vector. Each variant got a ``cid:`` record of its own, each within its budget, and averaging the
releases lifted the cosine to the clean vector from 0.164 to 0.536. The rule now (the server's):
a text's content id is the HMAC of its case-folded canonical form, and with a ledger texts with
one clean vector are one record through the ledger's aliases -- across commands. Each exact text
still gets noise of its own and is charged as a release of that record, so the budget stops the
averaging.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import LaplaceMechanism
from privembed.cli import app
from privembed.data.io import read_embeddings
from privembed.keys.ledger import BudgetExceeded, DuplicateIds, Ledger
from privembed.release import content_ids, protect_file

KEY = bytes(range(11, 43))
NOTE = "The patient has diabetes and was seen on Monday"
#: case, whitespace and compatibility (NFKC) variants of NOTE: one canonical form, case-folded
CASE_VARIANTS = [
    NOTE,
    NOTE.lower(),
    NOTE.upper(),
    NOTE.title(),
    NOTE.swapcase(),
    "  " + NOTE + "  ",
    NOTE.replace(" ", "\u00a0"),  # no-break spaces
    NOTE.replace(" ", "\t"),
    NOTE.replace("diabetes", "DIABETES"),
    NOTE.replace("patient", "ＰＡＴＩＥＮＴ"),  # fullwidth letters (NFKC folds them)
    NOTE.replace("Monday", "ＭＯＮＤＡＹ").lower(),
    NOTE.replace("The", "THE"),
    NOTE.replace("seen", "SEEN"),
    NOTE.replace("has", "HaS"),
    NOTE.replace("and", "AnD"),
    NOTE.replace("was", "WaS"),
    NOTE.replace("on", "ON"),
    NOTE.replace("The patient", "the  PATIENT"),
    NOTE.replace("Monday", "monday"),
    NOTE.replace("diabetes", "Diabetes").replace("Monday", "MONDAY"),
]
#: zero-width characters the canonical form keeps and a BERT-style tokenizer drops
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
ZW_VARIANTS = [NOTE[:i] + z + NOTE[i:] for i in (1, 5, 9, 17) for z in ZERO_WIDTH]


class UncasedEmbedder:
    """Stands in for an uncased model: the vector depends on the text as a BERT-style uncased
    tokenizer sees it (lower case, accents and format characters such as zero-width spaces
    dropped, whitespace collapsed), so every variant above has one clean vector."""

    def __init__(self, model: str | None = None, **_: object) -> None:
        self.model = model

    def metadata(self) -> dict[str, object]:
        return {"embedding_model": "uncased-fake", "dim": 16, "normalized": True}

    @staticmethod
    def seen(text: str) -> str:
        t = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text).lower())
        t = "".join(c for c in t if unicodedata.category(c) not in ("Mn", "Cf"))
        return " ".join(t.split())

    def encode(self, texts, **_: object) -> np.ndarray:
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(self.seen(t).encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(16)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


class CasedEmbedder(UncasedEmbedder):
    """Stands in for a cased model: every exact text has a vector of its own."""

    @staticmethod
    def seen(text: str) -> str:
        return text


def _one_text(path: Path, text: str) -> Path:
    path.write_text(json.dumps({"text": text}) + "\n")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _protect_each(tmp_path: Path, variants: list[str], led: Path, embedder=UncasedEmbedder):
    """Protect each variant in a run of its own (the attacker's submissions); returns the
    outputs of the accepted runs and the number refused by the budget."""
    mech = LaplaceMechanism(epsilon=10.0)  # 20-LDP per release
    accepted, refused = [], 0
    for i, v in enumerate(variants):
        src = _one_text(tmp_path / f"v{i}.jsonl", v)
        out = tmp_path / f"o{i}.parquet"
        try:
            protect_file(src, out, mech, key=KEY, ledger=led, budget_epsilon=100.0,
                         ids_from_content=True, embedder=embedder())  # fmt: skip
        except BudgetExceeded:
            refused += 1
            assert not out.exists()
        else:
            accepted.append(read_embeddings(out))
    return accepted, refused


@pytest.mark.parametrize("embedder", [UncasedEmbedder, CasedEmbedder])
def test_case_and_compatibility_variants_are_one_record_and_the_budget_stops_them(
    tmp_path, embedder
):
    """20 case/whitespace/NFKC variants of one note, each protected in a run of its own with a
    budget of 5 releases: one record in the ledger, 5 releases accepted, 15 refused -- under an
    uncased model (one clean vector) and a cased one (20 clean vectors: the case-folded content
    id alone makes them one record, as the server's identity does)."""
    X = UncasedEmbedder().encode(CASE_VARIANTS + ZW_VARIANTS)  # one clean vector, 40 texts
    assert len(set(CASE_VARIANTS)) == 20 and len(set(ZW_VARIANTS)) == 20
    assert np.array_equal(X, np.repeat(X[:1], len(X), axis=0))
    assert len({r.tobytes() for r in CasedEmbedder().encode(CASE_VARIANTS)}) == 20
    led = tmp_path / "l.db"
    accepted, refused = _protect_each(tmp_path, CASE_VARIANTS, led, embedder)
    assert (len(accepted), refused) == (5, 15)
    with Ledger(led, readonly=True) as L:
        spent = L.spent()
    assert len(spent) == 1 and spent[0].releases == 5 and spent[0].free_releases == 0
    assert spent[0].epsilon == pytest.approx(100.0)
    ids = {str(t.ids[0]) for t in accepted}
    assert ids == {content_ids(key=KEY, texts=[NOTE])[0]}
    # identity binds the budget, content binds the noise: five different releases
    Y = np.vstack([t.X for t in accepted])
    assert len({row.tobytes() for row in Y}) == 5


def test_zero_width_variants_are_one_record_through_the_ledgers_aliases(tmp_path):
    """Variants the canonical form keeps apart (zero-width characters) but the model embeds to
    one clean vector: one record through the ledger's clean-vector aliases, whose budget refuses
    them past its limit; the ledger holds the aliases as keyed tags only."""
    assert len(set(content_ids(key=KEY, texts=ZW_VARIANTS))) == 20  # the ids alone differ
    led = tmp_path / "l.db"
    accepted, refused = _protect_each(tmp_path, ZW_VARIANTS, led)
    assert (len(accepted), refused) == (5, 15)
    first = content_ids(key=KEY, texts=ZW_VARIANTS[:1])[0]
    assert {str(t.ids[0]) for t in accepted} == {first}  # the first variant's record
    with Ledger(led, readonly=True) as L:
        assert [(s.record_id, s.releases) for s in L.spent()] == [("s:" + first, 5)]
    assert b"\xe2\x80\x8b" not in led.read_bytes()  # no text in the ledger


def test_a_replayed_variant_is_free_and_identical_after_the_budget_is_spent(tmp_path):
    """Replay: re-releasing an exact text already released is the same keyed release (free,
    bit-identical) even once the record's budget is spent; any other variant is refused."""
    led = tmp_path / "l.db"
    accepted, _ = _protect_each(tmp_path, CASE_VARIANTS[:5], led)
    (tmp_path / "again").mkdir()
    again, refused = _protect_each(tmp_path / "again", [CASE_VARIANTS[2], CASE_VARIANTS[7]], led)
    assert refused == 1 and len(again) == 1
    assert np.array_equal(again[0].X, accepted[2].X)
    with Ledger(led, readonly=True) as L:
        (s,) = L.spent()
    assert (s.releases, s.free_releases) == (6, 1)


def test_variants_in_one_file_are_refused_and_nothing_is_written(tmp_path):
    """A file is one release and a record is released once per release: case variants in one
    file are refused before the model runs (named, with why and what to do); zero-width variants
    with a ledger once their clean vectors are known -- the ledger left byte-identical."""
    led = tmp_path / "l.db"
    _protect_each(tmp_path, ["another note"], led)  # an existing ledger
    before = _sha(led)
    mech = LaplaceMechanism(epsilon=10.0)
    for name, texts in (("case", [NOTE, "unrelated", NOTE.upper()]),
                        ("zw", [NOTE, "unrelated", ZW_VARIANTS[3]])):  # fmt: skip
        src = tmp_path / f"{name}.jsonl"
        src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        out = tmp_path / f"{name}.parquet"
        with pytest.raises(DuplicateIds) as info:
            protect_file(src, out, mech, key=KEY, ledger=led, ids_from_content=True,
                         embedder=UncasedEmbedder())  # fmt: skip
        msg = str(info.value)
        assert "rows 0 and 2 are one record" in msg and "--id-field" in msg, msg
        assert not out.exists() and _sha(led) == before


def test_the_fold_reaches_index_across_commands(tmp_path, monkeypatch):
    """``protect`` then ``index --ids-from-content`` (texts embedded there): a zero-width variant
    indexed later lands on the record the protected text claimed, under that record's id in the
    store; the budget counts both commands."""
    import privembed.data.embedders as embedders
    from privembed.integrations.collection import index_file

    led = tmp_path / "l.db"
    _protect_each(tmp_path, [NOTE], led)
    monkeypatch.setattr(embedders, "Embedder", UncasedEmbedder)
    src = tmp_path / "more.jsonl"
    src.write_text(json.dumps({"text": ZW_VARIANTS[0]}) + "\n" + json.dumps({"text": "x"}) + "\n")
    with Ledger(led) as L:
        index_file(src, "faiss", tmp_path / "db", mechanism=LaplaceMechanism(epsilon=10.0),
                   key=KEY, ledger=L, ids_from_content=True)  # fmt: skip
    first = content_ids(key=KEY, texts=[NOTE])[0]
    with Ledger(led, readonly=True) as L:
        spent = {s.record_id: s.releases for s in L.spent()}
    assert spent["s:" + first] == 2 and len(spent) == 2


def test_wrappers_take_variants_of_one_text_in_one_call(tmp_path):
    """The sentence-transformers / LangChain path (no ledger): variants of one text in one call
    share its content id and each gets noise of its own (whitespace variants, which share a
    content id, were refused as duplicate ids -- and case variants would be, now that case is
    folded)."""
    from privembed.integrations._text import TextProtector

    enc = UncasedEmbedder()
    tp = TextProtector(enc.encode, LaplaceMechanism(epsilon=10.0), key=KEY, model_id="fake")
    Y = tp.documents([NOTE, "  " + NOTE, NOTE, NOTE.upper(), "other"])
    assert Y.shape == (5, 16)
    assert np.array_equal(Y[0], Y[2])  # one exact text: one release
    assert len({Y[i].tobytes() for i in (0, 1, 3)}) == 3  # variants: noise of their own


@pytest.mark.slow
def test_cli_variants_with_the_offline_uncased_model(tmp_path):
    """Through ``privembed protect`` and the offline all-MiniLM-L6-v2 (uncased; its tokenizer
    drops zero-width characters): case and zero-width variants, each in a run of its own, are
    one record, and the budget refuses the third."""
    runner = CliRunner()
    key = tmp_path / "k.key"
    assert runner.invoke(app, ["keygen", "-o", str(key)]).exit_code == 0
    led = tmp_path / "l.db"
    codes = []
    for i, v in enumerate([NOTE, NOTE.upper(), ZW_VARIANTS[0], ZW_VARIANTS[7]]):
        src = _one_text(tmp_path / f"v{i}.jsonl", v)
        r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / f"o{i}.parquet"),
                                "-m", "laplace", "--epsilon", "10", "--key-file", str(key),
                                "--ids-from-content", "--ledger", str(led),
                                "--budget-epsilon", "40", "--backend", "onnx-int8"])  # fmt: skip
        codes.append(r.exit_code)
        if r.exit_code:
            assert "release refused" in " ".join(r.stderr.split()), r.output
    assert codes == [0, 0, 2, 2]
    with Ledger(led, readonly=True) as L:
        assert [s.releases for s in L.spent()] == [2]
