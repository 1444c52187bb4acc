"""``PrivateSentenceTransformer`` (fake encoders), and the real text path with MiniLM (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import get_mechanism
from privembed.cli import app
from privembed.integrations.sentence_transformers import PrivateSentenceTransformer
from privembed.io import write_embeddings

from .conftest import KEY


class FakeST:
    """Duck-types SentenceTransformer.encode/encode_query (query vectors differ on purpose)."""

    def __init__(self, d: int = 12) -> None:
        self.d = d
        self.calls: list[dict] = []

    def _vec(self, text: str, salt: int) -> np.ndarray:
        seed = sum(text.encode()) * 7 + salt
        return np.random.default_rng(seed).standard_normal(self.d).astype(np.float32)

    def encode(self, texts, **kw):
        self.calls.append(kw)
        return np.stack([self._vec(t, 0) for t in texts])

    def encode_query(self, texts, **kw):
        return np.stack([self._vec(t, 0) + 0.01 * self._vec(t, 1) for t in texts])

    def get_sentence_embedding_dimension(self) -> int:
        return self.d


def test_encode_protects_and_encode_query_does_not():
    fake = FakeST()
    m = PrivateSentenceTransformer(
        fake, mechanism=get_mechanism("gaussian", epsilon=3.0, delta=1e-5), key=KEY
    )
    docs = m.encode(["alpha", "beta", "alpha"])
    assert docs.shape == (3, 12) and docs.dtype == np.float32
    np.testing.assert_array_equal(docs[0], docs[2])  # keyed by the text
    np.testing.assert_array_equal(m.encode_document("beta"), docs[1])
    assert fake.calls[0] == {"convert_to_numpy": True, "show_progress_bar": False}
    q = m.encode_query("alpha")
    plain = fake.encode_query(["alpha"])[0]
    np.testing.assert_allclose(q, plain / np.linalg.norm(plain), rtol=1e-6)
    assert float(q @ docs[0]) < 0.95  # the document is noised
    assert m.get_sentence_embedding_dimension() == 12 and m.metric == "cosine"


def test_projection_and_tensor_output():
    import torch

    mech = get_mechanism("projection", k=5, epsilon=5.0, delta=1e-5)
    m = PrivateSentenceTransformer(FakeST(), mechanism=mech, rng=0)
    t = m.encode(["a", "b"], convert_to_tensor=True)
    assert isinstance(t, torch.Tensor) and tuple(t.shape) == (2, 5)
    assert m.encode_query(["a"]).shape == (1, 5)
    assert m.get_sentence_embedding_dimension() == 5


def test_a_plain_callable_works_as_a_model():
    m = PrivateSentenceTransformer(
        lambda texts: np.eye(4)[: len(texts)], mechanism=get_mechanism("laplace", epsilon=50.0)
    )
    assert m.encode(["a", "b"]).shape == (2, 4)
    with pytest.raises(TypeError, match="texts must be strings"):
        m.encode([1])


@pytest.mark.slow
def test_real_model_text_path_index_and_search(tmp_path, key_file):
    """MiniLM end to end: embed notes, index protected vectors, search with a text query."""
    from privembed.embedders import Embedder

    notes = [
        "patient reports chest pain radiating to the left arm",
        "follow-up for type 2 diabetes, metformin dose adjusted",
        "child with fever and ear pain, suspected otitis media",
        "knee swelling after a fall while skiing",
        "persistent dry cough for three weeks, chest x-ray ordered",
        "migraine with aura, prescribed triptan",
        "routine prenatal visit at twenty weeks",
        "skin rash after starting a new antibiotic",
    ]
    emb = Embedder()
    X = emb.encode(notes)
    src = tmp_path / "notes.parquet"
    write_embeddings(src, X, ids=[f"n{i}" for i in range(len(notes))], metadata=emb.metadata())
    runner = CliRunner()
    r = runner.invoke(
        app,
        [
            "index",
            str(src),
            "--path",
            str(tmp_path / "db"),
            "-m",
            "gaussian",
            "--epsilon",
            "1e5",
            "--delta",
            "1e-5",
            "--key-file",
            str(key_file),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["search", "heart pain spreading into the arm", "--path", str(tmp_path / "db"), "--json"],
    )
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)[0]["hits"]
    assert hits[0]["id"] == "n0"
    # the wrapper: protected documents, plain queries, the right document ranks first
    # (epsilon 2000: expected cosine to the clean vector 0.83, so the clean margin 0.25 between
    # the first and second documents survives the noise with overwhelming probability)
    st = PrivateSentenceTransformer(
        mechanism=get_mechanism("gaussian", epsilon=2000.0, delta=1e-5), key=KEY
    )
    D = st.encode(notes)
    q = st.encode_query("high blood sugar medication")
    assert int(np.argmax(D @ q)) == 1
