"""What front ends read from a mechanism class instead of lists of names (issue 25.2).

A sweep, ``evaluate`` and ``advise`` ask the class which parameter trades privacy for utility
(``privacy_parameter``) and whether it needs ``delta`` (``needs("delta")``, from its
constructor); a new mechanism gets both from its own definition.
"""

from __future__ import annotations

import re
from pathlib import Path

import privembed
from privembed.mechanisms import MECHANISMS
from privembed.mechanisms.base import Mechanism


def test_the_privacy_parameter_is_a_constructor_parameter():
    for name, cls in MECHANISMS.items():
        assert cls.privacy_parameter in cls.parameter_names(), name
    assert MECHANISMS["empirical"].privacy_parameter == "sigma"
    assert MECHANISMS["laplace"].privacy_parameter == "epsilon"


def test_needs_reads_the_constructor():
    needs_delta = {n for n, c in MECHANISMS.items() if c.needs("delta")}
    assert needs_delta == {"gaussian", "projection"}
    assert all(c.needs(c.privacy_parameter) for n, c in MECHANISMS.items())

    class Extra(Mechanism):  # a new mechanism: what it requires is what it declares
        name = "extra"

        def __init__(self, *, epsilon: float, delta: float, width: int = 3) -> None:
            self.epsilon, self.delta, self.width = epsilon, delta, width

    assert (
        Extra.needs("delta") and not Extra.needs("width") and Extra.privacy_parameter == "epsilon"
    )


def test_evaluation_does_not_list_mechanism_names_for_these_decisions():
    src = Path(privembed.__file__).parent / "evaluation"
    spelled = re.compile(r'in \("gaussian", "projection"\)|[!=]= "empirical"')
    offenders = [
        f"{f.name}:{i}"
        for f in sorted(src.glob("*.py"))
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if spelled.search(line)
    ]
    assert not offenders, offenders


def test_every_registered_mechanism_has_its_family_auditor():
    """A mechanism registered without its family auditor fails here (the generic black-box
    auditor is the fallback for mechanisms users register; the contract row is checked by
    tests/mechanisms/test_contract.py::test_every_registered_mechanism_has_a_case)."""
    from privembed.audit._families import AUDITORS, Family

    for name in MECHANISMS:
        assert name in AUDITORS and type(AUDITORS[name]) is not Family, f"{name}: no auditor"


def test_every_keyword_of_every_registered_mechanism_is_described():
    """A mechanism registered with a keyword nobody described fails here (and its help
    raises): the meaning of a parameter is written once, in mechanisms/params.py."""
    from privembed.mechanisms.params import PARAMETERS, describe, takers

    for name, cls in MECHANISMS.items():
        missing = [p for p in cls.parameter_names() if p not in PARAMETERS]
        assert not missing, f"{name}: undescribed constructor keywords {missing}"
    assert set(PARAMETERS) == {p for c in MECHANISMS.values() for p in c.parameter_names()}
    assert takers("mask") == ["mahalanobis"] and describe("mask").endswith("(mahalanobis).")


def test_a_new_mechanism_keyword_needs_a_description(monkeypatch):
    import pytest

    from privembed.mechanisms.params import describe, takers

    class Extra(Mechanism):
        name = "extra"

        def __init__(self, *, epsilon: float, width: int = 3) -> None:
            self.epsilon, self.width = epsilon, width

    monkeypatch.setitem(MECHANISMS, "extra", Extra)
    assert "extra" in takers("epsilon") and "(" in describe("epsilon")  # not every one now
    with pytest.raises(KeyError, match="'width' is not described"):
        describe("width")


def test_the_mechanism_options_help_is_the_description():
    """protect's and audit's mechanism options say what mechanisms/params.py says, with the
    mechanisms that take each read from the registry (no hand-kept list of names)."""
    import typer

    from privembed._cli.common import MECHANISM_OPTIONS
    from privembed.cli import app
    from privembed.mechanisms.params import describe

    group = typer.main.get_group(app)
    for command in ("protect", "audit"):
        params = {p.name: p for p in group.commands[command].params}
        for name in MECHANISM_OPTIONS:
            # the help may go on to list a choice's values ("One of: ...", common.tidy_help)
            assert params[name].help.startswith(describe(name)), (command, name)
