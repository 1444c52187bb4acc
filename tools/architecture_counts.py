"""Counts behind issue 25's "must show": long functions, repeated CLI options, release policy
written outside the release path. Prints a small table; run from the project root:

    python tools/architecture_counts.py
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src" / "privembed"


def long_functions(limit: int = 100) -> list[tuple[str, int]]:
    out = []
    for f in sorted(SRC.rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    out.append((f"{f.relative_to(SRC)}:{node.name}", n))
    return sorted(out, key=lambda t: -t[1])


def option_declarations() -> tuple[int, int, Counter[str]]:
    """typer.Option calls in the CLI modules, and how often each flag is declared: spelled out
    (``typer.Option("--json"``, ``typer.Option("-o", "--output"``) or taken from the parameter's
    name (``seed: Annotated[int, typer.Option(help=...)]``)."""
    names: Counter[str] = Counter()
    spelled = re.compile(r'typer\.Option\(\s*(?:"-[a-z]",\s*)?"(--[a-z0-9-]+)"')
    from_name = re.compile(r"\b([a-z_0-9]+): Annotated\[[^=]*?typer\.Option\(\s*(?:help=|\))")
    total = 0
    for f in [SRC / "cli.py", *sorted((SRC / "_cli").glob("*.py"))]:
        text = f.read_text(encoding="utf-8")
        total += len(re.findall(r"typer\.Option\(", text))
        for m in spelled.finditer(text):
            names[m.group(1)] += 1
        for m in from_name.finditer(text):
            names["--" + m.group(1).replace("_", "-")] += 1
    repeats = sum(n - 1 for n in names.values() if n > 1)
    return total, repeats, names


def shared_flag_uses() -> Counter[str]:
    """Uses of the shared flags of ``_cli/options.py`` (declared there once) by the commands."""
    uses: Counter[str] = Counter()
    for f in [SRC / "cli.py", *sorted((SRC / "_cli").glob("*.py"))]:
        if f.name == "options.py":
            continue
        for m in re.finditer(r"\b([a-z_]+_flag)\(", f.read_text(encoding="utf-8")):
            uses[m.group(1)] += 1
    return uses


def command_options() -> tuple[int, int, Counter[str], set[str]]:
    """The options of every command as the CLI builds them (not as the source spells them):
    how many (command, option) uses there are, how many distinct declarations serve them (an
    ``Opt*`` alias used by five commands is one declaration), the flags declared at more than
    one site, and which of those are shared flags of ``_cli/options.py`` (one spelling, the help
    worded per command)."""
    import typing

    from typer.models import OptionInfo

    from privembed import cli
    from privembed._cli.options import SHARED

    def commands(app: Any) -> Any:
        for c in app.registered_commands:
            yield c.callback
        for g in app.registered_groups:
            yield from commands(g.typer_instance)

    sites: dict[str, set[int]] = {}
    uses = 0
    for f in commands(cli.app):
        for name, hint in typing.get_type_hints(f, include_extras=True).items():
            for m in getattr(hint, "__metadata__", ()):
                if not isinstance(m, OptionInfo):
                    continue
                decls = [*([m.default] if isinstance(m.default, str) else []), *m.param_decls]
                long = [d for d in decls if str(d).startswith("--")]
                flag = long[0] if long else "--" + name.replace("_", "-")
                sites.setdefault(flag, set()).add(id(m))
                uses += 1
    repeated = Counter({k: len(v) for k, v in sites.items() if len(v) > 1})
    return uses, sum(len(v) for v in sites.values()), repeated, set(SHARED)


def policy_copies() -> dict[str, list[str]]:
    """Places outside the release path that spell a release rule themselves."""
    rules = {
        # an error message (a string on the line), not a docstring mentioning the rule
        "refuse already-protected input": r"\"[^\"\n]*is already protected \(",
        "seed or key, not both": r"give a seed or a key, not both|give --seed or --key-file",
        "open a ledger": r"\bLedger\(|ledger_for_command\(",
        "private id set": r"\b_IdSet\b|\brecord_key\(i\) for i in ids",
        "HMAC domain literal": r"b[\"']privembed/",
    }
    out: dict[str, list[str]] = {}
    for name, pat in rules.items():
        hits = []
        for f in sorted(SRC.rglob("*.py")):
            rel = str(f.relative_to(SRC))
            if rel.startswith("release") or rel in (
                "core/labels.py",
                "keys/ledger.py",
                "keys/ledger_pg.py",
            ):
                continue
            if re.search(pat, f.read_text(encoding="utf-8")):
                hits.append(rel)
        out[name] = hits
    return out


def main() -> None:
    longs = long_functions()
    total, repeats, names = option_declarations()
    print(f"functions over 100 lines: {len(longs)}")
    for name, n in longs[:10]:
        print(f"  {n:5d}  {name}")
    print(f"typer.Option declarations: {total}; repeats of a named flag: {repeats}")
    print("  most repeated: " + ", ".join(f"{k} x{v}" for k, v in names.most_common(6)))
    uses = shared_flag_uses()
    print(
        f"shared flags (declared once in _cli/options.py): {len(uses)}, used {sum(uses.values())} "
        "times: " + ", ".join(f"{k} x{v}" for k, v in uses.most_common(6))
    )
    uses_n, sites_n, repeated, shared = command_options()
    own = Counter({k: v for k, v in repeated.items() if k not in shared})
    print(
        f"options as the commands have them: {uses_n} uses, {sites_n} declarations; flags "
        f"declared at several sites: {len(repeated)} ({len(repeated) - len(own)} of them shared "
        "flags of _cli/options.py, one spelling with the help worded per command)"
    )
    print("  others: " + ", ".join(f"{k} x{v}" for k, v in own.most_common(8)))
    print("release policy outside the release path:")
    for rule, where in policy_copies().items():
        print(f"  {rule}: {len(where)} {where}")


if __name__ == "__main__":
    main()
