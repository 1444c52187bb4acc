"""Figures of time and size, measured in one place with the load they were measured under.

The README once said the demo takes "about 20 s" and "about 25 s" (32 s measured), k' = 69 and 60
(68 measured), and ``make test`` "about 11 minutes" (49 beside other work) -- issue 40.5.
Every such figure now comes from ``docs/measured.json``: each measurement with its date,
commit, cores and load average; ``docs/measured.md`` is rendered from it (never edited by
hand). Prose quotes a quantity once, as the range of its measurements with the load stated;
``tests/test_figures.py`` checks that the README states one figure per quantity and that its
range holds every measurement recorded here.

Usage (repository root, the development environment)::

    python -m tools.measured demo [--note TEXT]          # privembed demo here: time, k', ε, recall
    python -m tools.measured make demo [--note TEXT]     # the target in a fresh clone of HEAD,
    python -m tools.measured make test [--note TEXT]     #   empty pip cache: time, venv size
    python -m tools.measured add QUANTITY VALUE --note TEXT [--load TEXT]
                                                         # one taken elsewhere (a CI log ...)
    python -m tools.measured render                      # docs/measured.md from the JSON

Every command but ``render`` appends to the JSON, then renders. A measurement is never timed
inside a test (tests read the files only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "measured.json"
TABLE = ROOT / "docs" / "measured.md"

#: name -> (what is measured, unit, decimals shown)
QUANTITIES: dict[str, tuple[str, str, int]] = {
    "demo_run_s": ("`privembed demo` (300 notes), wall time", "s", 0),
    "demo_k_prime": ("k' of the demo's best noise setting (seeded advice; law in the note)", "", 0),
    "demo_epsilon": ("ε of the demo's best noise setting", "", 1),
    "demo_recall_plain": ("the demo's recall of the clean top 10, plain search", "", 2),
    "demo_recall_reranked": ("the demo's recall of the clean top 10, re-ranked from k'", "", 2),
    "make_demo_s": ("`make demo` from a fresh clone, empty pip cache, wall time", "s", 0),
    "demo_env_gb": ("size of `.venv-demo` after `make demo`", "GB", 1),
    "make_test_min": (
        "`make test` (pytest on 2 workers, claims, wheel smoke), wall time",
        "min",
        0,
    ),
    "dev_env_gb": ("size of `.venv` after `make test`", "GB", 1),
}


def load() -> dict[str, Any]:
    return json.loads(SOURCE.read_text(encoding="utf-8"))


def save(data: dict[str, Any]) -> None:
    SOURCE.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class LoadSampler:
    """The 1-minute load average at the start, every ``every`` seconds, and at the end."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self.samples.append(os.getloadavg()[0])
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def describe(self) -> str:
        lo, hi = min(self.samples), max(self.samples)
        return f"load average {lo:.1f}–{hi:.1f}" if hi - lo >= 0.1 else f"load average {lo:.1f}"


def record(
    quantity: str,
    value: float,
    *,
    load: str,
    note: str,
    source: str,
    date: str | None = None,
    commit: str | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    if quantity not in QUANTITIES:
        raise SystemExit(f"unknown quantity {quantity!r}; one of {', '.join(QUANTITIES)}")
    return {
        "quantity": quantity,
        "value": value,
        "date": date or dt.date.today().isoformat(),
        "commit": commit or _commit(),
        "machine": machine or f"{os.cpu_count()} cores, {_cpu()}",
        "load": load,
        "note": note,
        "source": source,
    }


def measure_demo(note: str) -> list[dict[str, Any]]:
    """Run ``privembed demo --json`` of this environment in a temporary folder."""
    exe = Path(sys.executable).parent / "privembed"
    with tempfile.TemporaryDirectory() as tmp, LoadSampler() as sampler:
        t0 = time.perf_counter()
        out = subprocess.run(
            [str(exe), "demo", "--json"], cwd=tmp, capture_output=True, text=True, check=True
        )
        seconds = time.perf_counter() - t0
    path = json.loads(out.stdout)["path"]
    how = "tools/measured.py demo"
    setting = (
        f"recommended {path['recommended']}; best noise setting {path['mechanism']} "
        f"ε {path['epsilon']:.1f}, k' {path['k_prime']}"
    )
    note = f"{setting}; {note}" if note else setting
    values = {
        "demo_run_s": round(seconds, 1),
        "demo_k_prime": path["k_prime"],
        "demo_epsilon": round(path["epsilon"], 1),
        "demo_recall_plain": round(path["recall_plain_search"], 3),
        "demo_recall_reranked": round(path["recall_reranked_search"], 3),
    }
    return [record(q, v, load=sampler.describe(), note=note, source=how) for q, v in values.items()]


def _size_gb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.stat(p).st_size
    return round(total / 1e9, 2)


def measure_make(target: str, note: str, keep: Path | None = None) -> list[dict[str, Any]]:
    """``make target`` in a fresh clone of HEAD with an empty pip cache (the clone is left in
    ``keep`` when given, e.g. to run the README's commands in its environment afterwards)."""
    if target not in ("demo", "test"):
        raise SystemExit(f"make target must be demo or test, got {target!r}")
    with tempfile.TemporaryDirectory() as tmp:
        clone = keep if keep is not None else Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = dict(os.environ, PIP_CACHE_DIR=str(Path(tmp) / "pip-cache"))
        with LoadSampler() as sampler:
            t0 = time.perf_counter()
            r = subprocess.run(["make", target], cwd=clone, env=env)
            seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"make {target} failed (exit {r.returncode}); nothing recorded")
        how = f"tools/measured.py make {target}"
        if target == "demo":
            size = _size_gb(clone / ".venv-demo")
            values = {"make_demo_s": round(seconds), "demo_env_gb": size}
        else:
            values = {
                "make_test_min": round(seconds / 60, 1),
                "dev_env_gb": _size_gb(clone / ".venv"),
            }
        return [
            record(q, v, load=sampler.describe(), note=note, source=how) for q, v in values.items()
        ]


def _fmt(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def current(data: dict[str, Any], quantity: str) -> list[dict[str, Any]]:
    """The measurements of ``quantity`` that still hold (not superseded by a change)."""
    return [
        m for m in data["measurements"] if m["quantity"] == quantity and not m.get("superseded")
    ]


def figure(data: dict[str, Any], quantity: str) -> str:
    """The quantity as prose states it: the range of its current measurements, with its unit."""
    _what, unit, decimals = QUANTITIES[quantity]
    vals = [m["value"] for m in current(data, quantity)]
    if not vals:
        return "not measured"
    lo, hi = _fmt(min(vals), decimals), _fmt(max(vals), decimals)
    shown = lo if lo == hi else f"{lo}–{hi}"
    return f"{shown} {unit}".strip()


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Measured figures",
        "",
        "<!-- generated by `python -m tools.measured render` from docs/measured.json; "
        "do not edit by hand -->",
        "",
        "Every figure of time and size that the README and the documents quote, with the load it",
        "was measured under. Prose quotes a quantity as the range below; a new measurement is",
        "added with `python -m tools.measured` (see its docstring) and can widen the range. The",
        "demo's advice is seeded (k', ε), its recall is measured on a fresh key each run. A",
        "measurement that a later change made obsolete stays listed, struck through, outside",
        "the range.",
        "",
        "| quantity | range | measurements (value: date, commit, machine, load, note) |",
        "|---|---|---|",
    ]
    for q, (what, unit, decimals) in QUANTITIES.items():
        ms = [m for m in data["measurements"] if m["quantity"] == q]
        if not ms:
            lines.append(f"| {what} | not measured | |")
            continue
        each = "<br>".join(
            ("~~" if m.get("superseded") else "")
            + f"{_fmt(m['value'], decimals)} {unit}".strip()
            + ("~~ (superseded: " + m["superseded"] + ")" if m.get("superseded") else "")
            + f": {m['date']}, {m['commit']}, {m['machine']}, {m['load']}"
            + (f"; {m['note']}" if m["note"] else "")
            + ("" if m["source"].startswith("tools/measured.py") else f" ({m['source']})")
            for m in ms
        )
        lines.append(f"| {what} | {figure(data, q)} | {each} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m tools.measured", description=__doc__.split("\n")[0]
    )
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run privembed demo here and record it")
    d.add_argument("--note", default="")
    m = sub.add_parser("make", help="run a make target in a fresh clone and record it")
    m.add_argument("target", choices=["demo", "test"])
    m.add_argument("--note", default="")
    m.add_argument("--keep", type=Path, help="clone into this new folder and leave it there")
    a = sub.add_parser("add", help="record a measurement taken elsewhere")
    a.add_argument("quantity", choices=list(QUANTITIES))
    a.add_argument("value", type=float)
    a.add_argument("--note", required=True, help="how and where it was measured")
    a.add_argument("--load", default="load not recorded")
    a.add_argument("--date", help="when (default: today)")
    a.add_argument("--commit", help="of which commit (default: HEAD)")
    a.add_argument("--machine", help="cores and CPU (default: this machine)")
    sub.add_parser("render", help="write docs/measured.md from docs/measured.json")
    args = ap.parse_args(argv)
    data = load()
    if args.command == "demo":
        data["measurements"].extend(measure_demo(args.note))
    elif args.command == "make":
        data["measurements"].extend(measure_make(args.target, args.note, args.keep))
    elif args.command == "add":
        data["measurements"].append(
            record(
                args.quantity,
                args.value,
                load=args.load,
                note=args.note,
                source="added by hand",
                date=args.date,
                commit=args.commit,
                machine=args.machine,
            )
        )
    if args.command != "render":
        save(data)
    TABLE.write_text(render(data), encoding="utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
