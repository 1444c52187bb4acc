"""The claims registry: every security claim the documentation makes, its tests, its mutations.

``claims/claims.toml`` holds one ``[[claim]]`` table per claim::

    [[claim]]
    id = "payload.ad-binds-record"          # unique, "<area>.<name>"
    doc = "retrieval"                       # the document that states it (DOCUMENTS)
    region = "payloads"                     # the generated table it appears in
    claim = "A payload opens only for ..."  # the sentence, as the document states it
    tests = ["tests/test_payload_attacks.py::test_x", ...]   # the tests that check it

    [[claim.mutation]]                      # at least one: a small patch that breaks the claim
    name = "the record id dropped from the associated data"
    file = "src/privembed/payload.py"       # one edit: file, old, new ...
    old = "..."                             # ... found exactly once in the file
    new = "..."
    run = ["tests/...::test_x"]             # optional: the tests to run for it (a subset)
    ci = true                               # optional: this claim's mutation in CI's subset

Every claim keeps exactly one mutation in CI's subset (``make test``): the one marked ``ci = true``,
else its first; ``make mutations`` runs them all.
A mutation with several edits lists them as ``[[claim.mutation.edit]]`` tables (file, old, new).
Everything here is data and checks on it; :mod:`tools.claims.docs` renders the tables and
:mod:`tools.claims.mutate` runs the mutations.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGISTRY = REPO / "claims" / "claims.toml"

#: the documents whose claims are registered: short name -> path (relative to the repository)
DOCUMENTS = {
    "security": "docs/security.md",
    "server": "docs/server.md",
    "retrieval": "docs/retrieval.md",
}

_ID = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9][a-z0-9-]*$")
_REGION = re.compile(r"^[a-z][a-z0-9-]*$")
_CLAIM_KEYS = {
    "id",
    "doc",
    "region",
    "claim",
    "tests",
    "fast",
    "mutation",
}  # fast: refused, with a note
_MUTATION_KEYS = {"name", "file", "old", "new", "edit", "run", "ci"}
_EDIT_KEYS = {"file", "old", "new"}


class RegistryError(ValueError):
    """The registry is malformed, or refers to something that does not exist."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (found exactly once) by ``new`` in ``file`` (relative to the repository)."""

    file: str
    old: str
    new: str

    def apply(self, text: str) -> str:
        """``text`` with the edit made; :class:`RegistryError` unless ``old`` occurs once."""
        count = text.count(self.old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times"
            raise RegistryError(
                f"{self.file}: the mutation's old text is {where} (it must occur exactly once; "
                f"update the registry after a refactor): {_first_line(self.old)!r}"
            )
        return text.replace(self.old, self.new, 1)


@dataclass(frozen=True)
class Mutation:
    claim: str
    name: str
    edits: tuple[Edit, ...]
    run: tuple[str, ...]  # the tests run for it (the claim's tests unless narrowed)
    ci: bool = False  # marked as the claim's mutation in CI's subset

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.file for e in self.edits))

    def apply(self, root: Path) -> dict[str, str]:
        """The mutated text of every file it touches under ``root`` (nothing is written)."""
        out: dict[str, str] = {}
        for e in self.edits:
            text = out.get(e.file)
            if text is None:
                path = root / e.file
                if not path.is_file():
                    raise RegistryError(f"mutation {self.label}: no file {e.file}")
                text = path.read_text(encoding="utf-8")
            out[e.file] = e.apply(text)
        for f, text in out.items():
            if f.endswith(".py"):
                try:
                    compile(text, f, "exec")
                except SyntaxError as exc:
                    raise RegistryError(
                        f"mutation {self.label}: {f} does not compile once mutated ({exc.msg}, "
                        f"line {exc.lineno}): a mutation must break the claim, not the syntax"
                    ) from None
        return out

    @property
    def label(self) -> str:
        return f"{self.claim}: {self.name}"


@dataclass(frozen=True)
class Claim:
    id: str
    doc: str
    region: str
    text: str
    tests: tuple[str, ...]
    mutations: tuple[Mutation, ...] = field(default=())

    @property
    def ci_mutation(self) -> Mutation:
        """The mutation CI's subset runs for this claim: the one marked ``ci``, else the first."""
        return next((m for m in self.mutations if m.ci), self.mutations[0])


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else s


def _str(table: dict[str, object], key: str, where: str) -> str:
    v = table.get(key)
    if not isinstance(v, str) or not v.strip():
        raise RegistryError(f"{where}: {key} must be a non-empty string, got {v!r}")
    return v


def _tests(v: object, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(t, str) and t for t in v):
        raise RegistryError(f"{where}: {key} must be a non-empty list of test ids, got {v!r}")
    if len(set(v)) != len(v):
        raise RegistryError(f"{where}: {key} lists a test twice")
    return tuple(v)


def _mutation(claim: str, m: dict[str, object], tests: tuple[str, ...], i: int) -> Mutation:
    where = f"claim {claim}, mutation {i + 1}"
    unknown = set(m) - _MUTATION_KEYS
    if unknown:
        raise RegistryError(f"{where}: unknown key(s) {sorted(unknown)}")
    name = _str(m, "name", where)
    raw_edits = m.get("edit")
    if raw_edits is not None:
        if any(k in m for k in ("file", "old", "new")):
            raise RegistryError(f"{where}: give file/old/new or [[edit]] tables, not both")
        if not isinstance(raw_edits, list) or not raw_edits:
            raise RegistryError(f"{where}: edit must be a list of tables")
        tables = raw_edits
    else:
        tables = [{k: m.get(k) for k in ("file", "old", "new")}]
    edits = []
    for j, e in enumerate(tables):
        ew = f"{where}, edit {j + 1}"
        if not isinstance(e, dict) or set(e) - _EDIT_KEYS:
            raise RegistryError(f"{ew}: an edit has exactly the keys file, old, new")
        f, old, new = _str(e, "file", ew), _str(e, "old", ew), e.get("new")
        if not isinstance(new, str):
            raise RegistryError(f"{ew}: new must be a string, got {new!r}")
        if old == new:
            raise RegistryError(f"{ew}: old and new are the same text")
        if f.startswith(("tests/", "claims/", "tools/")) or ".." in Path(f).parts:
            raise RegistryError(
                f"{ew}: mutations change what the tests check (src/, examples/), never the "
                f"tests or the registry, got {f}"
            )
        edits.append(Edit(f, old, new))
    run = tests
    if "run" in m:
        run = _tests(m["run"], where, "run")
        extra = set(run) - set(tests)
        if extra:
            raise RegistryError(f"{where}: run lists tests the claim does not: {sorted(extra)}")
    ci = m.get("ci", False)
    if not isinstance(ci, bool):
        raise RegistryError(f"{where}: ci must be true or false")
    return Mutation(claim, name, tuple(edits), run, ci)


def load(path: Path = REGISTRY) -> list[Claim]:
    """The claims of the registry, checked for form (not yet against the repository)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{path.name}: {exc}") from None
    if set(data) != {"claim"} or not isinstance(data["claim"], list):
        raise RegistryError(f"{path.name}: the file holds [[claim]] tables only")
    claims: list[Claim] = []
    seen: set[str] = set()
    for i, c in enumerate(data["claim"]):
        where = f"claim {c.get('id', i + 1)!r}"
        unknown = set(c) - _CLAIM_KEYS
        if unknown:
            raise RegistryError(f"{where}: unknown key(s) {sorted(unknown)}")
        cid = _str(c, "id", where)
        if not _ID.match(cid):
            raise RegistryError(f"{where}: id must look like 'area.name' (lower case, dashes)")
        if cid in seen:
            raise RegistryError(f"{where}: the id is used twice")
        seen.add(cid)
        doc = _str(c, "doc", where)
        if doc not in DOCUMENTS:
            raise RegistryError(f"{where}: doc must be one of {sorted(DOCUMENTS)}, got {doc!r}")
        region = _str(c, "region", where)
        if not _REGION.match(region):
            raise RegistryError(f"{where}: region must be lower case with dashes, got {region!r}")
        text = " ".join(_str(c, "claim", where).split())
        tests = _tests(c.get("tests"), where, "tests")
        if "fast" in c:
            raise RegistryError(
                f"{where}: 'fast' is gone: every claim has one mutation in CI's subset (mark it "
                f"with ci = true in its [[claim.mutation]], else the first is used)"
            )
        raw = c.get("mutation")
        if not isinstance(raw, list) or not raw:
            raise RegistryError(
                f"{where}: a claim needs at least one [[claim.mutation]] that breaks it"
            )
        muts = tuple(_mutation(cid, m, tests, j) for j, m in enumerate(raw))
        names = [m.name for m in muts]
        if len(set(names)) != len(names):
            raise RegistryError(f"{where}: two mutations share a name")
        if sum(m.ci for m in muts) > 1:
            raise RegistryError(f"{where}: at most one mutation is marked ci = true")
        claims.append(Claim(cid, doc, region, text, tests, muts))
    return claims


# ---- checks against the repository ------------------------------------------------------------


def _defined(tree: ast.Module, parts: list[str]) -> bool:
    """Whether ``parts`` (a function, or a class and its method) is defined in ``tree``."""
    body: list[ast.stmt] = tree.body
    for i, name in enumerate(parts):
        found = None
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == name:
                    found = node
        if found is None:
            return False
        if i < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return False
            body = found.body
    return True


def missing_tests(claims: list[Claim], root: Path = REPO) -> list[str]:
    """Test ids of the registry that name no file, function or method (parameters are checked
    when the tests run: an unknown parameter id is a collection error there)."""
    out = []
    trees: dict[str, ast.Module | None] = {}
    for t in sorted({t for c in claims for t in c.tests}):
        path, _, rest = t.partition("::")
        if path not in trees:
            p = root / path
            trees[path] = ast.parse(p.read_text(encoding="utf-8")) if p.is_file() else None
        tree = trees[path]
        if tree is None or not path.startswith("tests/"):
            out.append(t)
            continue
        if rest:
            parts = re.sub(r"\[.*\]$", "", rest).split("::")
            if not _defined(tree, parts):
                out.append(t)
    return out


def check(claims: list[Claim], root: Path = REPO) -> list[str]:
    """Every problem of the registry against the repository at ``root``: unknown tests, and
    mutations whose old text is not found exactly once or that do not compile."""
    problems = [f"no such test: {t}" for t in missing_tests(claims, root)]
    for c in claims:
        for m in c.mutations:
            try:
                m.apply(root)
            except RegistryError as exc:
                problems.append(str(exc))
    return problems
