"""``python -m tools.claims``: check the registry, render the claim tables, run the mutations.

    python -m tools.claims check             # the registry against the repository and the docs
    python -m tools.claims render            # rewrite the generated regions of the docs
    python -m tools.claims list [--fast]     # claims, tests and mutations
    python -m tools.claims mutate --fast     # CI's subset (make test)
    python -m tools.claims mutate            # every claim (make mutations)
    python -m tools.claims mutate --claim payload.ad-binds-record --jobs 2

Exit status: 0 when everything holds, 1 when a check fails (a stale table, a missing test, a
mutation not caught), 2 for a malformed registry or bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import docs, mutate, registry


def _load() -> list[registry.Claim]:
    return registry.load(registry.REGISTRY)


def cmd_check(_: argparse.Namespace) -> int:
    claims = _load()
    problems = registry.check(claims)
    try:
        problems += [
            f"{d}: its claim tables differ from the registry (run: python -m tools.claims render)"
            for d in docs.stale_documents(claims)
        ]
    except registry.RegistryError as exc:
        problems.append(str(exc))
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not problems:
        n = sum(len(c.mutations) for c in claims)
        print(f"{len(claims)} claims, {n} mutations: the registry and the documents agree.")
    return 1 if problems else 0


def cmd_render(_: argparse.Namespace) -> int:
    claims = _load()
    for d in docs.write_documents(claims):
        print(f"rewrote the claim tables of {d}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for c in mutate.select(_load(), fast=args.fast):
        print(f"{c.id}: {c.text}")
        for t in c.tests:
            print(f"    test      {t}")
        for m in c.mutations:
            ci = " (CI)" if m is c.ci_mutation else ""
            print(f"    mutation  {m.name}{ci}  [{', '.join(m.files)}]")
    return 0


def _line(o: mutate.Outcome) -> str:
    what = "baseline (every catching test, unmutated)" if o.mutation is None else o.mutation.label
    by = f"  <- {', '.join(o.failed)}" if o.status == "caught" and o.failed else ""
    return f"{o.status:<9}{o.seconds:7.1f}s  {what}{by}"


def cmd_mutate(args: argparse.Namespace) -> int:
    claims = mutate.select(_load(), fast=args.fast, ids=args.claim)
    n = sum(len(c.mutations) for c in claims)
    print(
        f"{len(claims)} claims, {n} mutations, {len({t for c in claims for t in c.tests})} "
        f"tests; {args.jobs} copy(ies) of the source tree",
        flush=True,
    )

    def report(o: mutate.Outcome) -> None:
        print(_line(o), flush=True)
        if not o.ok:
            print("    " + o.tail.strip().replace("\n", "\n    ")[-2500:], flush=True)

    t0 = time.monotonic()
    outcomes = mutate.check_mutations(
        claims,
        jobs=args.jobs,
        timeout=args.timeout,
        baseline=not args.no_baseline,
        keep=args.keep,
        every=args.every,
        report=report,
    )
    seconds = time.monotonic() - t0
    if args.json:
        mutate.write_json(Path(args.json), outcomes, seconds)
    bad = [o for o in outcomes if not o.ok]
    caught = sum(o.status == "caught" for o in outcomes)
    print(f"{caught} of {n} mutations caught in {seconds:.0f} s", flush=True)
    if bad or caught != n:
        for o in bad:
            print(f"error: {_line(o)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.claims", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="the registry against the repository and the docs")
    sub.add_parser("render", help="rewrite the generated claim tables of the docs")
    ls = sub.add_parser("list", help="claims, tests and mutations")
    ls.add_argument("--fast", action="store_true", help="CI's subset (one mutation per claim)")
    mu = sub.add_parser("mutate", help="every mutation must make one of its claim's tests fail")
    mu.add_argument("--fast", action="store_true", help="CI's subset (one mutation per claim)")
    mu.add_argument("--claim", action="append", default=[], help="only this claim (repeatable)")
    mu.add_argument("--jobs", type=int, default=1, help="copies run side by side (default 1)")
    mu.add_argument("--timeout", type=float, default=mutate.DEFAULT_TIMEOUT, help="s per run")
    mu.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    mu.add_argument("--every", action="store_true", help="run every test of a mutation")
    mu.add_argument("--keep", action="store_true", help="keep the copies (for debugging)")
    mu.add_argument("--json", help="write the outcomes to this file")
    args = p.parse_args(argv)
    if getattr(args, "jobs", 1) < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    try:
        return {"check": cmd_check, "render": cmd_render, "list": cmd_list, "mutate": cmd_mutate}[
            args.command
        ](args)
    except registry.RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
