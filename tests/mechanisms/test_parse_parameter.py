"""``-p NAME=VALUE``: values converted by the type each mechanism declares (issue 25.4)."""

from __future__ import annotations

import typing

import pytest

from privembed.mechanisms import MECHANISMS, parse_parameter


def test_every_declared_parameter_type_resolves():
    # the declared types are what the parser reads: each must resolve (no stray forward refs)
    for name, cls in MECHANISMS.items():
        hints = typing.get_type_hints(cls.__init__)
        for p in cls.parameter_names():
            assert p in hints, f"{name}.{p} has no declared type"


@pytest.mark.parametrize(
    ("mechanism", "param", "text", "value"),
    [
        ("projection", "k", "64", 64),
        ("projection", "kind", "srht", "srht"),
        ("projection", "kind", "nan", "nan"),  # a str stays a str: no guessing
        ("projection", "epsilon", "5", 5.0),
        ("projection", "input_dim", "none", None),
        ("projection", "input_dim", "384", 384),
        ("laplace", "renormalize", "false", False),
        ("laplace", "renormalize", "Yes", True),
        ("gaussian", "delta", "1e-5", 1e-5),
    ],
)
def test_values_follow_the_declared_type(mechanism, param, text, value):
    got = parse_parameter(mechanism, param, text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("mechanism", "param", "text", "message"),
    [
        ("projection", "k", "6.5", "k (-p k=...) must be an int, got '6.5'"),
        ("projection", "k", "nan", "must be an int"),
        ("laplace", "renormalize", "maybe", "must be a bool"),
        ("laplace", "delta", "1e-5", "does not take delta"),
        ("laplas", "epsilon", "1", "mechanism must be one of"),
    ],
)
def test_bad_values_are_one_line_errors(mechanism, param, text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_parameter(mechanism, param, text)
