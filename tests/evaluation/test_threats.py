"""The threat-model registry and the verdict rule, on synthetic attack results."""

from __future__ import annotations

import dataclasses

import pytest

from privembed.evaluation.threats import (
    DEFENDS,
    DOES_NOT_DEFEND,
    INCONCLUSIVE,
    NO_EVIDENCE,
    NOT_MEASURED,
    THREATS,
    AttackEvidence,
    judge,
    judge_structural,
    threats_for,
)


def ev(attack: str, value: float, blind: float, half: float, clean_low: float) -> AttackEvidence:
    return AttackEvidence(attack, "stat", value, blind, value - half, value + half, clean_low)


def test_registry_names_each_attacker_with_what_they_hold_and_attacks() -> None:
    assert set(THREATS) == {
        "store_only",
        "auxiliary_text",
        "candidate_holder",
        "repeated_release",
        "basis_holder",
    }
    for t in THREATS.values():
        assert t.holds and t.title and (t.attacks or t.implied_by in THREATS)
    assert THREATS["repeated_release"].defended_by == "deployment"
    assert "linkage" in THREATS["candidate_holder"].attacks


def test_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        THREATS["x"] = THREATS["store_only"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        THREATS["store_only"].margin = 1.0  # type: ignore[misc]


def test_basis_holder_only_in_the_subspace_mode() -> None:
    assert "basis_holder" not in [t.name for t in threats_for("rerank")]
    assert "basis_holder" in [t.name for t in threats_for("subspace+rerank")]


def test_candidate_holder_reid_far_above_blind_does_not_defend() -> None:
    e = ev("linkage", 0.95, 0.001, 0.015, clean_low=0.99)
    v = judge(THREATS["candidate_holder"], [e])
    assert v.verdict == DOES_NOT_DEFEND and not v.defends
    assert "0.950" in v.reason and "0.001" in v.reason


def test_attack_weaker_than_blind_on_clean_is_no_evidence_never_defends() -> None:
    # it fails on protected vectors too -- but it failed on clean ones: no evidence
    e = ev("inversion", 0.0, 0.05, 0.01, clean_low=-0.02)
    v = judge(THREATS["auxiliary_text"], [e])
    assert v.verdict == NO_EVIDENCE and not v.defends


def test_strong_attack_within_margin_defends() -> None:
    e = ev("linkage", 0.005, 0.001, 0.004, clean_low=0.9)
    assert judge(THREATS["candidate_holder"], [e]).verdict == DEFENDS


def test_interval_straddling_the_margin_is_inconclusive() -> None:
    e = ev("linkage", 0.02, 0.0, 0.01, clean_low=0.9)  # excess [0.01, 0.03] vs margin 0.02
    assert judge(THREATS["candidate_holder"], [e]).verdict == INCONCLUSIVE


def test_point_under_margin_but_upper_end_above_is_not_defends() -> None:
    e = ev("linkage", 0.015, 0.0, 0.01, clean_low=0.9)
    assert judge(THREATS["candidate_holder"], [e]).verdict != DEFENDS


def test_the_strongest_strong_attack_decides() -> None:
    weak_loud = ev("token_inference", 0.9, 0.1, 0.01, clean_low=-0.1)  # weak: ignored
    quiet = ev("attribute", 0.51, 0.5, 0.005, clean_low=0.2)
    loud = ev("token_inference", 0.4, 0.1, 0.02, clean_low=0.2)
    t = THREATS["auxiliary_text"]
    assert judge(t, [weak_loud, quiet]).verdict == DEFENDS
    v = judge(t, [weak_loud, quiet, loud])
    assert v.verdict == DOES_NOT_DEFEND and v.evidence is loud


def test_attacks_of_other_threats_are_ignored() -> None:
    e = ev("linkage", 0.95, 0.001, 0.01, clean_low=0.99)
    assert judge(THREATS["auxiliary_text"], [e]).verdict == NOT_MEASURED


def test_structural_threat_judged_by_deployment_not_epsilon() -> None:
    t = THREATS["repeated_release"]
    assert judge_structural(t, keyed=True, ledger=True).defends
    v = judge_structural(t, keyed=False, ledger=False)
    assert v.verdict == DOES_NOT_DEFEND and "keyed noise" in v.reason
    with pytest.raises(ValueError, match="deployment"):
        judge(t, [])
    with pytest.raises(ValueError, match="epsilon"):
        judge_structural(THREATS["candidate_holder"], keyed=True, ledger=True)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"value": float("nan")}, "value must be a number"),
        ({"low": 0.6}, "interval must hold the value"),
    ],
)
def test_bad_evidence_is_refused_with_the_parameter(kw: dict, match: str) -> None:
    base = dict(
        attack="linkage", statistic="reid@1", value=0.5, blind=0.0, low=0.4, high=0.6,
        clean_excess_low=0.1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=match):
        AttackEvidence(**{**base, **kw})


def test_store_only_is_never_judged_by_attacks_it_cannot_run():
    """The adaptive token attack trains on auxiliary text: it measures the attacker with public
    text. Neither its success nor its failure is a measurement of a store-only attacker (no
    such attack is implemented): the verdict is "not measured", with the stronger attacker's
    verdict quoted -- never a "defends (implied)" that nothing proves (issue 37)."""
    t = THREATS["store_only"]
    loud = ev("token_inference", 0.4, 0.2, 0.02, clean_low=0.1)
    v = judge(t, [loud])
    assert v.verdict == NOT_MEASURED and "does not defend" in v.reason
    quiet = ev("token_inference", 0.205, 0.2, 0.005, clean_low=0.1)
    v = judge(t, [quiet])
    assert v.verdict == NOT_MEASURED and "defends" in v.reason and not v.defends
    weak = ev("token_inference", 0.2, 0.2, 0.005, clean_low=-0.1)
    assert judge(t, [weak]).verdict == NOT_MEASURED


def test_attack_that_beats_blind_by_less_than_the_margin_on_clean_is_no_evidence():
    """Issue 37's case: token leakage 0.199 on clean vectors against blind 0.182 (lower end of
    the excess below the 0.02 margin), 0.169 at the setting. Beating blind at all is not
    enough: only an attack that beats it by the margin can show, by staying within the margin,
    that the noise stopped it."""
    t = THREATS["auxiliary_text"]
    barely = ev("token_inference", 0.169, 0.182, 0.005, clean_low=0.012)
    v = judge(t, [barely])
    assert v.verdict == NO_EVIDENCE and not v.defends and "margin" in v.reason
    strong = ev("token_inference", 0.169, 0.182, 0.005, clean_low=0.021)
    assert judge(t, [strong]).verdict == DEFENDS
