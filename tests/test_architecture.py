"""The package's import graph has no cycles (issue: one way to build a mechanism...).

Every ``import`` in ``src/privembed`` counts -- at module level and inside functions alike (a lazy
import still couples the two modules), except under ``if TYPE_CHECKING:``. ``from pkg import
sub`` where ``sub`` is a module is an edge to ``pkg.sub``; importing a package's ``__init__``
only for a submodule is not a dependency on everything the package re-exports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import privembed

ROOT = Path(privembed.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _targets(mod: str, path: Path, node: ast.AST, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = mod.split(".")
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
    names_are_modules = len(subs) == len(node.names)
    return subs if names_are_modules else [target, *subs]


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.imports: list[ast.AST] = []

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return  # annotations only
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.append(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports.append(node)


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        v = _Visitor()
        v.visit(ast.parse(f.read_text(encoding="utf-8")))
        for node in v.imports:
            for t in _targets(m, f, node, mods):
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != m and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_import_graph_has_no_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checker_finds_a_planted_cycle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_module_outside_mechanisms_tests_for_a_concrete_mechanism_class() -> None:
    """Front ends use the Mechanism hooks, not isinstance(..., PrivateProjection) and friends."""
    concrete = {
        "PrivateProjection",
        "GaussianMechanism",
        "EmpiricalGaussianMechanism",
        "LaplaceMechanism",
        "MahalanobisMechanism",
        "PurkayasthaMechanism",
    }
    offenders = []
    for f in ROOT.rglob("*.py"):
        if "mechanisms" in f.relative_to(ROOT).parts or "audit" in f.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if names & concrete:
                    offenders.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


# ---- the layers of docs/architecture.md ([tool.importlinter] in pyproject.toml) -------------


def layer_rows() -> list[list[str]]:
    """The rows of the layers contract, top to bottom (each a list of module names)."""
    import tomllib

    conf = tomllib.loads((ROOT.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in conf["tool"]["importlinter"]["contracts"] if c.get("type") == "layers"
    ]
    return [[m.strip() for m in row.replace("|", ":").split(":")] for row in contract["layers"]]


def row_of(module: str, rows: list[list[str]]) -> int | None:
    for i, row in enumerate(rows):
        if any(module == m or module.startswith(m + ".") for m in row):
            return i
    return None


def upward_imports(graph: dict[str, set[str]], rows: list[list[str]]) -> list[str]:
    out = []
    for a, targets in graph.items():
        ra = row_of(a, rows)
        for b in targets:
            rb = row_of(b, rows)
            if ra is not None and rb is not None and rb < ra:
                out.append(f"{a} -> {b}")
    return sorted(out)


def test_nothing_below_imports_from_above():
    """The same check as `lint-imports` (make lint), over this file's import graph."""
    found = upward_imports(import_graph(), layer_rows())
    assert not found, "imports from a higher layer:\n" + "\n".join(found)


def test_every_module_has_a_layer():
    rows = layer_rows()
    missing = sorted(m for m in import_graph() if m != "privembed" and row_of(m, rows) is None)
    assert not missing, f"modules in no row of [tool.importlinter] layers: {missing}"


def test_the_layer_check_finds_a_planted_upward_import():
    rows = [["p.top"], ["p.mid", "p.mid2"], ["p.base"]]
    graph = {"p.top": {"p.base"}, "p.mid": {"p.mid2"}, "p.base.x": {"p.mid"}, "p.mid2": set()}
    assert upward_imports(graph, rows) == ["p.base.x -> p.mid"]


def test_the_documented_layers_are_the_contract():
    """Each row's modules appear in docs/architecture.md's table, in the same order."""
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    lines = doc.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| layer (top to bottom)"))
    table = []
    for ln in lines[start + 2 :]:  # the layer table: the rows under its header and rule
        if not ln.startswith("|"):
            break
        table.append(ln)
    rows = layer_rows()
    assert len(table) == len(rows), (len(table), len(rows))
    for line, row in zip(table, rows, strict=True):
        first = line.split("|")[1]
        for m in row:
            short = m.removeprefix("privembed.")
            assert f"`{short}" in first, f"{m} is not in the architecture row {first.strip()!r}"


def test_the_source_tree_guard_sees_nested_new_and_changed_files(tmp_path):
    """The suite's guard (tests/conftest.py) compares every file, not only top-level names."""
    import os
    import time

    from tests.conftest import _tree

    (tmp_path / "docs" / "experiments").mkdir(parents=True)
    f = tmp_path / "docs" / "experiments" / "table.csv"
    f.write_text("a\n")
    (tmp_path / ".venv").mkdir()
    before = _tree(tmp_path)
    (tmp_path / "docs" / "experiments" / "new.png").write_bytes(b"x")
    f.write_text("b\n")
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))
    (tmp_path / ".venv" / "ignored.txt").write_text("tool state")
    after = _tree(tmp_path)
    assert set(after) - set(before) == {os.path.join("docs", "experiments", "new.png")}
    key = os.path.join("docs", "experiments", "table.csv")
    assert before[key] != after[key]
