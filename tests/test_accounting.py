"""Guarantee records: immutable data, round trips, the text they print."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from privembed import ApproxDP, Guarantee, MetricDP, NoGuarantee, PureDP, guarantee_from_dict

RECORDS: list[Guarantee] = [
    ApproxDP(5.0, 1e-5, neighbouring="any two unit vectors (l2 sensitivity 2)", note="analytic"),
    ApproxDP(0.0, 0.0),
    PureDP(20.0, neighbouring="any two unit vectors"),
    MetricDP(10.0, metric="l2", implied=(PureDP(20.0, neighbouring="any two unit vectors"),)),
    MetricDP(
        2.0,
        metric="Mahalanobis",
        implied=(MetricDP(math.inf, metric="l2", note="worst direction"),),
    ),
    NoGuarantee(reason="sigma chosen by hand"),
]


@pytest.mark.parametrize("g", RECORDS, ids=lambda g: type(g).__name__)
def test_round_trip_through_json(g: Guarantee) -> None:
    d = g.to_dict()
    assert d["kind"] == g.kind
    back = guarantee_from_dict(json.loads(json.dumps(d)))
    assert back == g and type(back) is type(g)
    assert hash(back) == hash(g)


@pytest.mark.parametrize("g", RECORDS, ids=lambda g: type(g).__name__)
def test_records_are_immutable(g: Guarantee) -> None:
    field = dataclasses.fields(g)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(g, field, 1.0)


def test_describe() -> None:
    assert RECORDS[0].describe() == (
        "(5, 1e-05)-LDP for any two unit vectors (l2 sensitivity 2); analytic"
    )
    assert RECORDS[2].describe() == "20-LDP (pure) for any two unit vectors"
    assert RECORDS[3].describe() == (
        "10-d_X privacy per unit of l2 distance (implies 20-LDP (pure) for any two unit vectors)"
    )
    assert NoGuarantee().describe() == "no formal guarantee"
    assert RECORDS[5].describe() == "no formal guarantee: sigma chosen by hand"


def test_short_forms() -> None:
    assert RECORDS[0].short() == "(5, 1e-05)-LDP"
    assert RECORDS[2].short() == "20-LDP"
    assert RECORDS[3].short() == "10-d_X(l2) => 20-LDP"
    assert RECORDS[5].short() == "none"


def test_is_formal() -> None:
    assert [g.is_formal for g in RECORDS] == [True, True, True, True, True, False]


@pytest.mark.parametrize(("eps", "delta"), [(-1.0, 1e-5), (1.0, -1e-9), (1.0, 1.5), (math.nan, 0)])
def test_approx_dp_rejects_invalid_parameters(eps: float, delta: float) -> None:
    with pytest.raises(ValueError) as info:
        ApproxDP(eps, delta)
    assert str(info.value) == f"invalid (epsilon, delta), got epsilon={eps!r}, delta={delta!r}."


@pytest.mark.parametrize("cls", [PureDP, MetricDP])
def test_pure_and_metric_reject_negative_epsilon(cls) -> None:
    with pytest.raises(ValueError, match=r"epsilon must be >= 0, got epsilon=-1\.0\."):
        cls(-1.0)


def test_unknown_kind() -> None:
    with pytest.raises(ValueError) as info:
        guarantee_from_dict({"kind": "renyi", "epsilon": 1.0})
    assert str(info.value) == "unknown guarantee kind, got kind='renyi'."


def test_from_dict_accepts_numeric_strings_and_infinity() -> None:
    g = guarantee_from_dict({"kind": "metric_dp", "epsilon": "inf", "metric": "l2"})
    assert g == MetricDP(math.inf, metric="l2")
    assert guarantee_from_dict({"kind": "pure_dp", "epsilon": 3}) == PureDP(3.0)
