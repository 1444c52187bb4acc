"""One number, one place (issue 40.5).

The README said the demo takes "about 20 s" and "about 25 s" (32 s measured), k' = 69 and 60
(68 measured), and ``make test`` "about 11 minutes" (49 beside other work). Figures of time and
size now come from ``docs/measured.json`` (each measurement with its load; ``tools/measured.py``
records them and renders ``docs/measured.md``). These tests read files only -- nothing is timed:
the README states each quantity once, as exactly the range the measurements give, and the
documents never quote the demo's k' otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tools.measured import TABLE, figure, load, render

REPO = Path(__file__).resolve().parents[1]
#: a figure: 12, 1.9, 117,659, or a range 12–32
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:–\d[\d,]*(?:\.\d+)?)?"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
#: quantity -> (what a clause must mention, the figure's pattern); a clause names one subject:
#: `make demo`, else `make test`, else the demo (see :func:`subject`)
DETECTORS: dict[str, tuple[str, str]] = {
    "make_demo_s": ("make demo", rf"({NUMBER}) s\b"),
    "demo_env_gb": ("make demo", rf"({NUMBER}) GB\b"),
    "make_test_min": ("make test", rf"({NUMBER}) min(?:utes)?\b"),
    "dev_env_gb": ("make test", rf"({NUMBER}) GB\b"),
    "demo_run_s": ("demo", rf"({NUMBER}) s\b"),
    "demo_k_prime": ("*", r"\bk' = (\d+)"),
    "demo_recall_reranked": ("*", rf"({NUMBER}) re-ranked against {NUMBER} for plain search"),
    "demo_recall_plain": ("*", rf"re-ranked against ({NUMBER}) for plain search"),
}
#: what the README must state (so that a rewording that hides a figure from the check fails)
STATED = {"make_demo_s", "demo_run_s", "make_test_min", "demo_k_prime", "demo_env_gb"}


def clauses(text: str) -> list[str]:
    """Each line of a code block, and the prose's clauses (whitespace joined, split after
    ``.``/``;`` and at paragraph breaks)."""
    out: list[str] = []
    for block in FENCE.findall(text):
        out.extend(block.splitlines())
    prose = FENCE.sub("\n\n", text)
    for para in re.split(r"\n\s*\n", prose):
        out.extend(re.split(r"(?<=[.;])\s+", " ".join(para.split())))
    return out


def subject(clause: str) -> str | None:
    if "make demo" in clause:
        return "make demo"
    if "make test" in clause:
        return "make test"
    if re.search(r"\bdemo\b", clause):
        return "demo"
    return None


def figures(text: str) -> dict[str, list[str]]:
    """quantity -> every figure of it that ``text`` states, in order."""
    found: dict[str, list[str]] = {q: [] for q in DETECTORS}
    for clause in clauses(text):
        who = subject(clause)
        for q, (needs, pattern) in DETECTORS.items():
            if needs == "*" or needs == who:
                found[q].extend(re.findall(pattern, clause))
    return found


def test_the_table_is_rendered_from_the_measurements():
    assert TABLE.read_text(encoding="utf-8") == render(load()), (
        "docs/measured.md is not what docs/measured.json gives: python -m tools.measured render"
    )


def test_every_measurement_says_where_and_under_which_load():
    for m in load()["measurements"]:
        assert m["load"] and m["machine"] and m["date"] and m["source"], m


def test_the_readme_states_each_quantity_once_as_its_measured_range():
    data = load()
    found = figures((REPO / "README.md").read_text(encoding="utf-8"))
    for q in STATED:
        assert found[q], f"the README no longer states {q} where the check finds it"
    for q, figs in found.items():
        want, _, unit = figure(data, q).partition(" ")
        assert len(set(figs)) <= 1, f"the README states {q} as {sorted(set(figs))}"
        for f in figs:
            assert f == want, (
                f"the README states {q} as {f} {unit}, the measurements give {want} {unit} "
                "(docs/measured.md)"
            )


@pytest.mark.parametrize("doc", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_the_documents_quote_the_demo_s_k_prime_as_measured(doc):
    want = figure(load(), "demo_k_prime")
    for clause in re.split(r"(?<=\.)\s+", " ".join(doc.read_text(encoding="utf-8").split())):
        if re.search(r"\bdemo\b", clause):
            for k in re.findall(r"\bk' = (\d+)", clause):
                assert k == want, f"{doc.name}: the demo's k' = {k}, measured {want}: {clause}"


def test_the_check_finds_the_issue_s_contradictions():
    """The README before issue 40, in short: every contradiction the issue lists is found."""
    old = (
        "`make demo` took 123 s lightly loaded; the demo itself runs in about 20 s of that. "
        "`make test` runs the whole suite (about 11 minutes on the 2-core machine).\n\n"
        "`privembed demo` runs the main job (about 25 s): searched with `rerank=k'` (on 300 "
        "notes: Laplace ε = 316, k' = 69; recall 0.93 re-ranked against 0.49 for plain search)."
        "\n\nWith `--texts` on 300 notes: rerank / Laplace ε = 316 (k' = 60).\n"
    )
    found = figures(old)
    assert found["demo_run_s"] == ["20", "25"]
    assert found["demo_k_prime"] == ["69", "60"]
    assert found["make_test_min"] == ["11"] and found["make_demo_s"] == ["123"]
    assert found["demo_recall_reranked"] == ["0.93"] and found["demo_recall_plain"] == ["0.49"]
