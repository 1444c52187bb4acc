"""One registry of key-derivation labels: distinct, prefix-free, and spelled nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import privembed
from privembed.core import labels

SRC = Path(privembed.__file__).parent
# HKDF's salt and info are inputs of another construction (not messages under K): exempt from
# the prefix rule, still distinct
_HKDF = {labels.PAYLOAD_HKDF_SALT, labels.PAYLOAD_HKDF_INFO}


def test_labels_are_distinct_and_prefix_free():
    assert len(set(labels.ALL)) == len(labels.ALL)
    public = {getattr(labels, n) for n in labels.__all__ if n != "ALL"}
    assert public == set(labels.ALL)
    msgs = [x for x in labels.ALL if x not in _HKDF]
    for a in msgs:
        assert a.startswith(b"privembed/")
        for b in msgs:
            assert a == b or not b.startswith(a), (a, b)


def test_no_module_spells_a_label_of_its_own():
    literal = re.compile(r"""b["']privembed/""")
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.name != "labels.py" and literal.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == [], offenders
