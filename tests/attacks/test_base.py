"""The common attack result: each report's headline number against its blind baseline."""

from __future__ import annotations

import numpy as np
import pytest

from privembed.attacks import LinkageAttack
from privembed.attacks.attribute import AttributeReport
from privembed.attacks.base import AttackResult, ScoredReport
from privembed.attacks.token_inference import TokenInferenceReport
from privembed.evaluation.threats import THREATS, AttackEvidence, judge


def test_linkage_result_is_the_wilson_interval_minus_chance():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 16))
    rep = LinkageAttack(ks=(1, 5)).score(X + 0.8 * rng.standard_normal(X.shape), X)
    assert isinstance(rep, ScoredReport)
    r = rep.result()
    lo, hi = rep.interval[1]
    assert (r.statistic, r.value, r.blind) == ("reid@1", rep.top_k[1], 1 / 200)
    assert r.excess_low == pytest.approx(lo - 1 / 200) and r.excess_high == pytest.approx(
        hi - 1 / 200
    )
    assert rep.result(5).statistic == "reid@5" and rep.result(5).blind == 5 / 200
    with pytest.raises(ValueError, match="k=3"):
        rep.result(3)


def test_token_and_attribute_results_use_their_own_baselines():
    tok = TokenInferenceReport(
        leakage=0.39, confidence=0.3, auc_sensitive=0.7, auc_all=0.7, leakage_chance=0.19,
        precision=0.5, recall=0.4, f1=0.45, rule="top-10", n_texts=150, n_sensitive=300,
        vocabulary_size=500, sensitive_in_vocabulary=200, leakage_excess_low=0.17,
        leakage_excess_high=0.23,
    )  # fmt: skip
    att = AttributeReport(auc=0.52, interval=(0.47, 0.57), blind=0.5, n_positive=40, n_negative=60)
    assert isinstance(tok, ScoredReport) and isinstance(att, ScoredReport)
    t, a = tok.result(), att.result()
    assert (t.blind, t.excess_low, t.beats_blind) == (0.19, 0.17, True)
    assert a.blind == 0.5 and a.excess_low == pytest.approx(-0.03) and not a.beats_blind


def test_results_become_threat_evidence_and_a_weak_clean_attack_is_no_evidence():
    at = AttackResult("attribute", "auc", 0.51, 0.5, -0.04, 0.06)
    weak_clean = AttackResult("attribute", "auc", 0.52, 0.5, -0.03, 0.07)
    v = judge(THREATS["auxiliary_text"], [AttackEvidence.from_results(at, weak_clean)])
    assert v.verdict.startswith("no evidence")
    with pytest.raises(ValueError, match="same attack"):
        AttackEvidence.from_results(at, AttackResult("linkage", "reid@1", 1.0, 0.0, 0.9, 1.0))


def test_a_result_with_a_reversed_interval_is_refused():
    with pytest.raises(ValueError, match="excess_low must be <= excess_high"):
        AttackResult("linkage", "reid@1", 0.5, 0.0, 0.6, 0.4)


def test_reconstruction_result_is_token_f1_against_the_blind_pairing():
    from privembed.attacks.reconstruction import score_against_blind

    texts = [f"patient {n} has {d}" for n, d in zip("abcdefgh", ["flu", "gout"] * 4, strict=True)]
    rep = score_against_blind(texts, texts, rng=0)  # perfect reconstructions
    assert isinstance(rep, ScoredReport)
    r = rep.result()
    assert (r.attack, r.statistic, r.value, r.blind) == (
        "inversion", "token_f1", rep.token_f1, rep.token_f1_blind,
    )  # fmt: skip
    assert (r.excess_low, r.excess_high) == rep.token_f1_excess_interval
    assert r.beats_blind == rep.beats_blind() is True
    # a generic sentence for every vector: exactly blind, whatever it writes
    same = score_against_blind(texts, ["patient a has flu"] * len(texts), rng=0).result()
    assert same.value == pytest.approx(same.blind) and not same.beats_blind


def test_an_attack_refuses_row_numbers_as_ids_for_keyed_noise():
    """Attempt: simulate a keyed release with ids 0..n-1 (what the release path forbids); the
    auditor must release exactly as the release path does, so it refuses too."""
    from privembed import DataError
    from privembed.attacks import simulate_release
    from privembed.mechanisms import LaplaceMechanism

    X = np.random.default_rng(0).standard_normal((4, 8))
    mech = LaplaceMechanism(epsilon=10.0)
    with pytest.raises(DataError, match="keyed noise needs record ids"):
        simulate_release(mech, X, key=b"k" * 32)
    Y = simulate_release(mech, X, key=b"k" * 32, ids=["a", "b", "c", "d"])
    from privembed.release import protect as release

    np.testing.assert_array_equal(Y, release(X, mech, ids=["a", "b", "c", "d"], key=b"k" * 32))


def test_fingerprint_result_is_accuracy_against_the_most_common_concept():
    from privembed.attacks.fingerprint import _report

    y = ["a"] * 30 + ["b"] * 10
    rep = _report(y, ["a"] * 40, ["a", "b"])  # always the majority: exactly blind
    assert isinstance(rep, ScoredReport)
    r = rep.result()
    assert (r.attack, r.statistic, r.value, r.blind) == ("fingerprint", "accuracy", 0.75, 0.75)
    assert r.excess_low < 0 < r.excess_high and not r.beats_blind
    good = _report(y, y, ["a", "b"]).result()  # names every concept
    assert good.value == 1.0 and good.beats_blind and good.excess_high == pytest.approx(0.25)


@pytest.mark.parametrize(
    "report",
    [
        "AttributeReport",
        "AveragingReport",
        "FingerprintReport",
        "LinkageReport",
        "ReconstructionReport",
        "TokenInferenceReport",
    ],
)
def test_every_attack_report_states_its_result(report):
    import privembed.attacks as attacks

    assert callable(getattr(getattr(attacks, report), "result", None))


def test_averaging_result_is_the_average_against_a_single_release():
    from privembed.attacks import averaging_attack, release_stack
    from privembed.mechanisms import LaplaceMechanism

    X = np.random.default_rng(0).standard_normal((40, 32))
    rep = averaging_attack(release_stack(LaplaceMechanism(epsilon=10.0), X, 8, rng=0), X)
    assert isinstance(rep, ScoredReport)
    r = rep.result()
    assert (r.attack, r.statistic, r.value, r.blind) == (
        "averaging",
        "cosine@8",
        rep.mean_cosine[-1],
        rep.single_cosine,
    )
    assert r.beats_blind and r.to_dict()["beats_blind"] is True


def test_one_attacker_split_under_the_randomness_policy():
    """The sweeps, evaluate and the attack commands split records with one function, which
    draws through the randomness policy (issue 25: the CLI's copy used numpy's default
    generator whatever the policy said)."""
    from pathlib import Path

    import privembed
    from privembed.attacks.base import attacker_split
    from privembed.core.rng import as_generator, use_bit_generator
    from privembed.evaluation import pipeline

    assert pipeline.attacker_split is attacker_split
    with use_bit_generator("philox"):
        aux, tgt = attacker_split(40, 0.5, seed=3)
        want = np.sort(as_generator(3).permutation(40)[:20])
    assert np.array_equal(aux, want)
    assert not np.array_equal(aux, np.sort(np.random.default_rng(3).permutation(40)[:20]))
    assert sorted([*aux, *tgt]) == list(range(40))
    with pytest.raises(ValueError, match="too few to split"):
        attacker_split(3, 0.5, seed=0)
    cli = (Path(privembed.__file__).parent / "_cli" / "attack.py").read_text(encoding="utf-8")
    assert "default_rng(" not in cli and ".permutation(" in cli  # the fingerprint halves only


def test_the_adaptive_fit_is_written_once():
    """The adaptive attacker (protect the auxiliary embeddings with the mechanism under test,
    then fit) is one implementation for the attacks trained by fit(targets, embeddings)."""
    from privembed.attacks import GEIAAttack, MLCAttack
    from privembed.attacks.base import AdaptiveFit

    for cls in (GEIAAttack, MLCAttack):
        assert issubclass(cls, AdaptiveFit)
        assert cls.fit_adaptive is AdaptiveFit.fit_adaptive, cls


def test_the_trained_attacks_follow_one_protocol():
    from privembed.attacks import AttributeProbe, GEIAAttack, MLCAttack, TransformerInversionAttack
    from privembed.attacks.base import TrainedAttack

    for cls in (AttributeProbe, GEIAAttack, MLCAttack, TransformerInversionAttack):
        assert issubclass(cls, TrainedAttack), cls
    assert not issubclass(AttackResult, TrainedAttack)
