"""The claims registry (``claims/claims.toml``, ``tools/claims``): every security claim has tests
and a mutation, the documents' claim tables are the registry's, and the mutation runner tells a
caught mutation from one that survives or breaks something else."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tools.claims import docs, mutate, registry

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claims() -> list[registry.Claim]:
    return registry.load()


def test_every_claim_has_tests_and_a_mutation_that_applies_exactly_once(claims):
    assert len(claims) >= 50
    assert all(c.tests and c.mutations for c in claims)
    assert registry.check(claims) == []  # every test exists; every snippet found once, compiles


def test_the_documents_claim_tables_are_generated_from_the_registry(claims):
    """A claim edited in a document but not in the registry (or the reverse) fails here: run
    ``python -m tools.claims render`` after changing ``claims/claims.toml``."""
    assert docs.stale_documents(claims) == []


def test_the_issue_31_mutations_are_registered(claims):
    """The five plausible bugs of issue 31 that once passed the tests named for them."""
    names = {m.name for c in claims for m in c.mutations}
    assert {
        "the record id dropped from the associated data (seal and open)",
        "payloads left unencrypted (still authenticated, by an HMAC tag)",
        "the mechanisms' fresh seed replaced by a per-process counter",
        "the output renamed before the ledger commit",
        "server/auth.py accepts any API key",
    } <= names


def _registry(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "claims.toml"
    p.write_text(textwrap.dedent(body))
    return p


_CLAIM = """
    [[claim]]
    id = "toy.claim"
    doc = "security"
    region = "toy"
    claim = "A claim."
    tests = ["tests/test_toy.py::test_it"]
"""


def test_a_claim_without_a_mutation_cannot_be_written(tmp_path):
    with pytest.raises(registry.RegistryError, match="needs at least one"):
        registry.load(_registry(tmp_path, _CLAIM))
    with pytest.raises(registry.RegistryError, match="tests must be a non-empty list"):
        registry.load(_registry(tmp_path, _CLAIM.replace('["tests/test_toy.py::test_it"]', "[]")))


def test_a_mutation_whose_snippet_moved_is_refused_loudly(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    edit = registry.Edit("src/m.py", "return 1", "return 2")
    with pytest.raises(registry.RegistryError, match="found 2 times"):
        edit.apply((tmp_path / "src" / "m.py").read_text())
    with pytest.raises(registry.RegistryError, match="not found"):
        registry.Edit("src/m.py", "return 3", "return 2").apply("def f():\n    return 1\n")
    broken = registry.Mutation(
        "toy.claim", "syntax", (registry.Edit("src/m.py", "f():", "f(:"),), ()
    )
    with pytest.raises(registry.RegistryError, match="does not compile"):
        broken.apply(tmp_path)
    with pytest.raises(registry.RegistryError, match="never the tests"):
        registry.load(_registry(tmp_path, _CLAIM + """
            [[claim.mutation]]
            name = "edits a test"
            file = "tests/test_toy.py"
            old = "a"
            new = "b"
        """))  # fmt: skip


def _toy_repository(root: Path) -> None:
    """A repository the runner can copy: a stand-in package, its console-script module and two
    tests of ``f``."""
    (root / "src" / "privembed").mkdir(parents=True)
    (root / "src" / "privembed" / "__init__.py").write_text("")
    (root / "src" / "privembed" / "m.py").write_text("def f():\n    return 1  # the claim\n")
    (root / "src" / "_privembed_entry.py").write_text("")
    (root / "tests").mkdir()
    (root / "tests" / "test_toy.py").write_text(
        "from privembed.m import f\n\n\ndef test_it():\n    assert f() == 1\n\n\n"
        "def test_other():\n    assert callable(f)\n"
    )
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-p no:warnings'\n")


@pytest.mark.slow
def test_the_runner_tells_caught_from_survived_and_broken_and_never_writes_the_source(tmp_path):
    src = tmp_path / "repo"
    _toy_repository(src)
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}

    def claim(name: str, old: str, new: str, tests: tuple[str, ...]) -> registry.Claim:
        m = registry.Mutation("toy.claim", name, (registry.Edit("src/privembed/m.py", old, new),),
                              tests)  # fmt: skip
        return registry.Claim("toy.claim", "security", "toy", "A claim.", tests, (m,))

    both = ("tests/test_toy.py::test_it", "tests/test_toy.py::test_other")
    cases = [
        claim("breaks f", "return 1", "return 2", both),
        claim("a comment", "# the claim", "# another comment", both),
        claim("breaks the import", "def f():", "import nowhere_at_all\n\n\ndef f():", both[1:]),
    ]
    out = mutate.check_mutations(cases, source=src, timeout=300)
    status = {o.mutation.name if o.mutation else "baseline": o.status for o in out}
    assert status == {
        "baseline": "passed",
        "breaks f": "caught",
        "a comment": "survived",
        "breaks the import": "broken",
    }, [(o.status, o.tail) for o in out]
    caught = next(o for o in out if o.status == "caught")
    assert caught.failed == ["tests/test_toy.py::test_it"]
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_catch_by_a_test_that_fails_unmutated_is_unverified(tmp_path):
    src = tmp_path / "repo"
    _toy_repository(src)
    with (src / "tests" / "test_toy.py").open("a") as fh:
        fh.write("\n\ndef test_always_fails():\n    assert False\n")
    flaky = ("tests/test_toy.py::test_always_fails",)
    m = registry.Mutation("toy.claim", "judged by a failing test",
                          (registry.Edit("src/privembed/m.py", "return 1", "return 2"),), flaky)  # fmt: skip
    c = registry.Claim("toy.claim", "security", "toy", "A claim.", flaky, (m,))
    seen: list[str] = []
    out = mutate.check_mutations(
        [c], source=src, timeout=300, report=lambda o: seen.append(o.status)
    )
    status = {o.mutation.name if o.mutation else "baseline": o.status for o in out}
    assert status == {"baseline": "failed", "judged by a failing test": "unverified"}
    assert seen == ["caught", "failed", "unverified"]  # reported as it ran, then voided
    assert not any(o.ok for o in out)


_TOY = """
[[claim]]
id = "toy.claim"
doc = "security"
region = "toy"
claim = "A claim."
tests = ["tests/test_toy.py::test_it"]
{extra}
[[claim.mutation]]
name = "first"
file = "src/privembed/m.py"
old = "return 1"
new = "return 2"
{ci1}
[[claim.mutation]]
name = "second"
file = "src/privembed/m.py"
old = "return 1"
new = "return 3"
{ci2}
"""


def _toy_registry(tmp_path, extra="", ci1="", ci2=""):
    p = tmp_path / "claims.toml"
    p.write_text(_TOY.format(extra=extra, ci1=ci1, ci2=ci2), encoding="utf-8")
    return p


def test_ci_keeps_one_mutation_of_every_claim_the_marked_one_else_the_first(tmp_path):
    (first,) = mutate.select(registry.load(_toy_registry(tmp_path)), fast=True)
    assert [m.name for m in first.mutations] == ["first"]
    (marked,) = mutate.select(registry.load(_toy_registry(tmp_path, ci2="ci = true")), fast=True)
    assert [m.name for m in marked.mutations] == ["second"]
    (every,) = mutate.select(registry.load(_toy_registry(tmp_path, ci2="ci = true")), fast=False)
    assert [m.name for m in every.mutations] == ["first", "second"]
    # the real registry: every claim is in CI's subset, with exactly one mutation
    real = registry.load()
    ci = mutate.select(real, fast=True)
    assert [c.id for c in ci] == [c.id for c in real]
    assert all(len(c.mutations) == 1 for c in ci)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"ci1": "ci = true", "ci2": "ci = true"}, "at most one mutation is marked ci"),
        ({"ci1": 'ci = "yes"'}, "ci must be true or false"),
        ({"extra": "fast = true"}, "'fast' is gone"),
    ],
)
def test_ci_marks_are_checked(tmp_path, kw, message):
    with pytest.raises(registry.RegistryError, match=message):
        registry.load(_toy_registry(tmp_path, **kw))


def test_the_baseline_reruns_only_real_catching_tests_of_the_mutation():
    run = ("tests/server/test_x.py::test_a", "tests/server/test_x.py::test_b")
    m = registry.Mutation("toy.claim", "m", (registry.Edit("src/privembed/m.py", "1", "2"),), run)
    # a captured log line that starts with ERROR is read as a failed id by the summary pattern
    junk = "   uvicorn.error:server.py:302 Cancel 1 running task(s)"
    o = mutate.Outcome(m, "caught", 1.0, ["tests/server/test_x.py::test_b", junk])
    assert mutate._catchers(o) == ["tests/server/test_x.py::test_b"]
    # nothing that names a test of the mutation: every test it ran is re-run
    assert mutate._catchers(mutate.Outcome(m, "caught", 1.0, [junk])) == list(run)
