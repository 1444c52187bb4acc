"""TransformerInversionAttack: a soft-prefix transformer decoder with iterative correction.

Tiny models, few steps, fixed seeds; the heavy training is benchmarks/bench_inversion.py.
The toy corpus: 3-word texts whose vectors are sums of fixed random word vectors (every word is
linearly readable), and the "embedder" of the correction mode is the same map.
"""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import StrengthCheck, TransformerInversionAttack
from privembed.attacks.reconstruction import score_against_blind
from privembed.attacks.transformer_inversion import PieceTokenizer, _Vocab, strength_verdict
from privembed.mechanisms import LaplaceMechanism

from .conftest import WORDS, bow_corpus

TINY = {
    "d_model": 32,
    "layers": 1,
    "heads": 2,
    "prefix": 2,
    "max_len": 6,
    "tokenizer": "word",
    "min_count": 1,
    "batch_size": 32,
    "lr": 3e-3,
    "dropout": 0.0,
    "num_threads": 1,
}


def bow_embed(texts):
    """The toy corpus's embedder: sum of the fixed word vectors, unit length."""
    W = np.random.default_rng(12345).standard_normal((len(WORDS), 48))
    index = {w: i for i, w in enumerate(WORDS)}
    out = np.zeros((len(texts), 48))
    for i, t in enumerate(texts):
        for w in t.split():
            if w in index:
                out[i] += W[index[w]]
        if not out[i].any():
            out[i, 0] = 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def toy():
    texts, X = bow_corpus(400, seed=4)
    return texts, X


@pytest.fixture(scope="module")
def fitted(toy):
    texts, X = toy
    atk = TransformerInversionAttack(
        **TINY, epochs=12, correction=150, correction_epochs=2, rounds=1, candidates=2
    )
    return atk.fit(texts[:320], X[:320], embed=bow_embed, rng=0)


def test_training_reduces_loss_and_the_attack_beats_blind_on_clean_vectors(toy, fitted):
    texts, X = toy
    h = fitted.history_
    assert len(h) == 12 and h[-1] < 0.5 * h[0]
    assert fitted.has_corrector_ and len(fitted.correction_history_) == 2
    rep = fitted.score(texts[320:], X[320:], embed=bow_embed)
    # measured 0.8-0.9 vs blind ~0.13 (each word is in 1/8 of the texts)
    assert rep.token_f1 > 0.5 > 0.25 > rep.token_f1_blind
    assert rep.beats_blind(min_excess=0.2)
    check = fitted.check(texts[320:], X[320:], embed=bow_embed)
    assert isinstance(check, StrengthCheck) and check.verdict == "evidence" and check.is_evidence


def test_independent_vectors_give_no_evidence(toy):
    texts, _ = toy
    Z = np.random.default_rng(3).standard_normal((400, 48))
    atk = TransformerInversionAttack(**TINY, epochs=4, correction=0)
    atk.fit(texts[:320], Z[:320], rng=0)
    check = atk.check(texts[320:], Z[320:])
    assert check.verdict == "no evidence"
    # the interval straddles 0: the vectors say nothing about the texts
    assert check.excess_interval[0] < 0.05


def test_correction_is_used_and_can_only_raise_the_target_cosine(toy, fitted):
    _texts, X = toy
    first = fitted.reconstruct(X[320:360])  # no embedder: the greedy first hypothesis
    corrected = fitted.reconstruct(X[320:360], embed=bow_embed, rounds=2)
    cos = lambda recs: np.einsum("ij,ij->i", bow_embed(recs), X[320:360])  # noqa: E731
    # every kept answer is the best candidate by cosine, and the first hypothesis is a candidate
    assert (cos(corrected) >= cos(first) - 1e-12).all()


def test_cached_decoding_matches_full_recomputation(toy, fitted):
    import torch

    _texts, X = toy
    Y = X[320:330]
    seqs = fitted._generate(torch, Y, None, None, greedy=True, gen=np.random.default_rng(0))
    # teacher-forced full forward over each generated sequence picks the same greedy tokens
    from privembed.attacks.transformer_inversion import BOS, EOS, PAD, SEP, UNK

    conds = fitted._conds(torch, Y, None)
    L = max(len(s) for s in seqs)
    text = torch.tensor([[BOS, *s, *([PAD] * (L - len(s)))] for s in seqs])
    with torch.no_grad():
        logits = fitted.model_(conds, None, text)
    logits[:, :, [PAD, BOS, UNK, SEP]] = -float("inf")
    pred = logits.argmax(-1)
    for i, s in enumerate(seqs):
        n = s.index(EOS) + 1 if EOS in s else len(s)
        assert pred[i, :n].tolist() == s[:n]


def test_same_seed_same_model_and_progress_changes_nothing(toy):
    texts, X = toy
    kw = {**TINY, "epochs": 1, "correction": 0}
    a = TransformerInversionAttack(**kw).fit(texts[:100], X[:100], rng=7)
    b = TransformerInversionAttack(**kw).fit(texts[:100], X[:100], rng=7)
    seen: list[int] = []
    c = TransformerInversionAttack(**kw).fit(
        texts[:100], X[:100], rng=7, on_step=lambda s, _loss: seen.append(s)
    )
    assert a.history_ == b.history_ == c.history_
    assert seen == [1, 2, 3, 4]  # 100 texts in batches of 32
    assert a.reconstruct(X[:20]) == b.reconstruct(X[:20]) == c.reconstruct(X[:20])
    d = TransformerInversionAttack(**kw).fit(texts[:100], X[:100], rng=8)
    assert d.history_ != a.history_


def test_save_load_round_trip(toy, fitted, tmp_path):
    _texts, X = toy
    fitted.save(tmp_path / "m")
    back = TransformerInversionAttack.load(tmp_path / "m")
    assert back.has_corrector_ and back.get_params() == fitted.get_params()
    assert back.reconstruct(X[320:340]) == fitted.reconstruct(X[320:340])
    assert back.reconstruct(X[320:330], embed=bow_embed) == fitted.reconstruct(
        X[320:330], embed=bow_embed
    )
    with pytest.raises(FileNotFoundError, match="no saved inversion attack"):
        TransformerInversionAttack.load(tmp_path / "nothing")
    (tmp_path / "m" / "config.json").write_text('{"format": "other"}')
    with pytest.raises(DataError, match="not a saved TransformerInversionAttack"):
        TransformerInversionAttack.load(tmp_path / "m")


def test_device_is_checked_and_is_not_saved(toy, fitted, tmp_path):
    import json

    import torch

    texts, X = toy
    with pytest.raises(TypeError, match="device must be a torch device name"):
        TransformerInversionAttack(device="")
    with pytest.raises(TypeError, match="device must be a torch device name"):
        TransformerInversionAttack(device=0)  # type: ignore[arg-type]
    assert fitted.get_params()["device"] == "cpu"
    fitted.save(tmp_path / "m")
    assert "device" not in json.loads((tmp_path / "m" / "config.json").read_text())["params"]
    back = TransformerInversionAttack.load(tmp_path / "m", device="cpu")
    assert back.reconstruct(X[320:330]) == fitted.reconstruct(X[320:330])
    if not torch.cuda.is_available():
        # asking for a GPU where there is none is one clear error, before any training
        with pytest.raises(RuntimeError, match=r"device='cuda' but torch .* sees no CUDA device"):
            TransformerInversionAttack(**{**TINY, "correction": 0}, device="cuda").fit(
                texts[:16], X[:16], rng=0
            )
        with pytest.raises(RuntimeError, match="sees no CUDA device"):
            TransformerInversionAttack.load(tmp_path / "m", device="cuda")


def test_adaptive_fit_uses_fresh_noise_and_warm_start_keeps_the_vocabulary(toy, fitted):
    texts, X = toy

    class Recording:
        def __init__(self):
            self.inner = LaplaceMechanism(epsilon=50.0)
            self.calls = 0

        def privatize(self, Xb, rng=None):
            self.calls += 1
            return self.inner.privatize(Xb, rng=rng)

    mech = Recording()
    kw = {**TINY, "epochs": 2, "correction": 0}
    a = TransformerInversionAttack(**kw).fit_adaptive(texts[:64], X[:64], mech, rng=0)
    # one protection for the statistics, then one per minibatch of every epoch (2 x 2)
    assert mech.calls == 1 + 4 and len(a.history_) == 2
    vocab = list(fitted.vocabulary_.pieces)
    import copy

    warm = copy.deepcopy(fitted)
    warm.correction = 0
    warm.fit_adaptive(texts[:64], X[:64], LaplaceMechanism(epsilon=50.0), rng=1, warm_start=True)
    assert warm.vocabulary_.pieces == vocab and warm.steps_ > fitted.steps_
    with pytest.raises(TypeError, match="privatize"):
        TransformerInversionAttack(**kw).fit_adaptive(texts[:10], X[:10], object())


def test_bad_inputs():
    with pytest.raises(ValueError, match="heads must divide d_model"):
        TransformerInversionAttack(d_model=30, heads=4)
    with pytest.raises(ValueError, match="tokenizer"):
        TransformerInversionAttack(tokenizer="bpe")
    with pytest.raises(ValueError, match="lr"):
        TransformerInversionAttack(lr=0)
    with pytest.raises(TypeError, match="standardize"):
        TransformerInversionAttack(standardize=1)  # type: ignore[arg-type]
    atk = TransformerInversionAttack(**TINY, correction=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        atk.reconstruct(np.ones((1, 4)))
    with pytest.raises(TypeError, match="single string"):
        atk.fit("abc", np.ones((1, 4)))
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        atk.fit(["a", 3], np.ones((2, 4)))  # type: ignore[list-item]
    with pytest.raises(DataError, match="2 rows but texts has 1"):
        atk.fit(["a"], np.ones((2, 4)))
    with pytest.raises(DataError, match=r"NaN|finite"):
        atk.fit(["a", "b"], np.array([[1.0, np.nan], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="needs embed"):
        TransformerInversionAttack(**TINY, correction=5).fit(["a b", "c d"], np.eye(2))
    with pytest.raises(RuntimeError, match="warm_start"):
        atk.fit(["a", "b"], np.eye(2), warm_start=True)


def test_wrong_dimension_is_refused(toy, fitted):
    with pytest.raises(DataError, match="dimension 5 but the attack was fitted on 48"):
        fitted.reconstruct(np.ones((2, 5)))


def test_piece_tokenizers():
    w = PieceTokenizer("word")
    assert w.split("Ann, 45.") == ["ann", ",", "45", "."]
    wp = PieceTokenizer("wordpiece")
    pieces = wp.split("Hypertension in Paris.")
    assert pieces[-1] == "." and any(p.startswith("##") for p in pieces)
    assert PieceTokenizer.join(pieces) == "hypertension in paris."
    v = _Vocab.build([["a", "b", "a"], ["<pad>", "c"]], min_count=2, max_size=None)
    assert v.pieces == ["<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a"]
    assert v.ids(["a", "z"], 5) == [5, 3] and v.pieces_of([5, 3, 2, 5]) == ["a", "<unk>"]


def test_strength_verdict_thresholds():
    t = ["ann has flu", "bob has gout", "cy is well", "dee has acne"] * 10
    assert strength_verdict(score_against_blind(t, t)).verdict == "evidence"
    same = strength_verdict(score_against_blind(t, ["has"] * 40))
    assert same.verdict == "no evidence" and same.token_f1 == pytest.approx(same.token_f1_blind)
    with pytest.raises(ValueError, match="min_excess"):
        strength_verdict(score_against_blind(t, t), min_excess=1.5)


def test_fit_corrector_on_a_model_fitted_without_one(toy):
    texts, X = toy
    atk = TransformerInversionAttack(**TINY, epochs=2, correction=0)
    atk.fit(texts[:100], X[:100], rng=0)
    assert not atk.has_corrector_
    with pytest.raises(ValueError, match="correction must be >= 1"):
        atk.fit_corrector(texts[:100], X[:100], embed=bow_embed)
    atk.correction, atk.correction_epochs = 40, 1
    with pytest.raises(DataError, match=r"embed returned shape \(40, 3\)"):
        atk.fit_corrector(texts[:100], X[:100], embed=lambda t: np.ones((len(t), 3)))
    steps = atk.steps_
    atk.fit_corrector(texts[:100], X[:100], embed=bow_embed, rng=0)
    assert atk.has_corrector_ and len(atk.correction_history_) == 1
    assert atk.steps_ == steps + 2 * 2  # 40 texts in batches of 32, each with a base batch
    with pytest.raises(RuntimeError, match="needs a fitted attack"):
        TransformerInversionAttack(**TINY).fit_corrector(texts[:5], X[:5], embed=bow_embed)
