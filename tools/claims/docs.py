"""The claim tables of the documents, generated from the registry.

A document marks each generated region with an opening and a closing comment::

    <!-- claims: keyed -->
    ... (rewritten by `python -m tools.claims render`) ...
    <!-- /claims -->

``keyed`` is a region name of the registry's claims for that document; ``counts`` (in
``docs/security.md``) is the summary of the whole registry. Everything between the markers is
replaced; everything outside them is left as it is.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from .registry import DOCUMENTS, REPO, Claim, RegistryError

_REGION = re.compile(
    r"(?P<open><!-- claims: (?P<name>[a-z][a-z0-9-]*) -->\n)(?P<body>.*?)(?P<close><!-- /claims -->)",
    re.DOTALL,
)
COUNTS = "counts"
COUNTS_DOC = "security"
_NOTE = (
    "<sub>Generated from `claims/claims.toml` by `python -m tools.claims render`: edit the "
    "registry, not this table. Each mutation is a small patch that breaks the claim; "
    "`make mutations` applies each one to a copy of the source tree and requires one of the "
    "claim's tests to fail.</sub>"
)


def _cell(s: str) -> str:
    return " ".join(s.split()).replace("|", "\\|")


def claim_table(claims: list[Claim]) -> str:
    """The markdown table of ``claims`` (in registry order)."""
    rows = [
        _NOTE,
        "",
        "| claim | checked by | broken on purpose by (each must fail a test) |",
        "|---|---|---|",
    ]
    for c in claims:
        tests = "<br>".join(f"`{_cell(t)}`" for t in c.tests)
        muts = "<br>".join(
            _cell(m.name) + (" (CI)" if m is c.ci_mutation else "") for m in c.mutations
        )
        rows.append(f"| **{c.id}**: {_cell(c.text)} | {tests} | {muts} |")
    return "\n".join(rows) + "\n"


def counts_text(claims: list[Claim]) -> str:
    """The summary of the registry: claims per document, distinct tests, mutations."""
    per_doc = defaultdict(int)
    for c in claims:
        per_doc[c.doc] += 1
    docs = ", ".join(f"`{DOCUMENTS[d]}` {per_doc[d]}" for d in DOCUMENTS if per_doc[d])
    tests = {t for c in claims for t in c.tests}
    muts = [m for c in claims for m in c.mutations]
    return (
        f"- **{len(claims)} claims** ({docs}), each with its tests and at least one mutation.\n"
        f"- **{len(tests)} distinct tests** check them (a test id is a function, a "
        "parametrised case or a file).\n"
        f"- **{len(muts)} mutations** break them, one claim at a time; every claim keeps one "
        f"(marked CI) in `make test`, so all {len(claims)} claims are checked on every CI run, "
        f"all {len(muts)} mutations by `make mutations`.\n"
    )


def render(text: str, doc: str, claims: list[Claim]) -> str:
    """``text`` (the document ``doc``) with every marked region regenerated.

    Raises :class:`RegistryError` if a region of the registry has no marker in the document, or
    a marker names a region without claims.
    """
    regions: dict[str, list[Claim]] = defaultdict(list)
    for c in claims:
        if c.doc == doc:
            regions[c.region].append(c)
    seen: set[str] = set()

    def body(m: re.Match[str]) -> str:
        name = m.group("name")
        if name in seen:
            raise RegistryError(f"{DOCUMENTS[doc]}: region {name!r} is marked twice")
        seen.add(name)
        if name == COUNTS and doc == COUNTS_DOC:
            new = counts_text(claims)
        elif name in regions:
            new = claim_table(regions[name])
        else:
            raise RegistryError(f"{DOCUMENTS[doc]}: region {name!r} has no claims in the registry")
        return m.group("open") + new + m.group("close")

    out = _REGION.sub(body, text)
    unmarked = sorted(set(regions) - seen)
    if unmarked:
        raise RegistryError(
            f"{DOCUMENTS[doc]}: no marker for region(s) {unmarked} "
            "(add '<!-- claims: NAME -->' and '<!-- /claims -->' where the table goes)"
        )
    if doc == COUNTS_DOC and COUNTS not in seen:
        raise RegistryError(f"{DOCUMENTS[doc]}: no marker for the counts region")
    return out


def stale_documents(claims: list[Claim], root: Path = REPO) -> list[str]:
    """The documents whose generated regions differ from what the registry gives."""
    out = []
    for doc, rel in DOCUMENTS.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if render(text, doc, claims) != text:
            out.append(rel)
    return out


def write_documents(claims: list[Claim], root: Path = REPO) -> list[str]:
    """Rewrite the generated regions of every document; return the documents changed."""
    changed = []
    for doc, rel in DOCUMENTS.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = render(text, doc, claims)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    return changed
