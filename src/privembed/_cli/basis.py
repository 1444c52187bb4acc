"""``privembed basis``: fit a subspace basis once and write it, for every later command to reuse.

Example::

    privembed basis emb.parquet -o basis.npz --basis dp-pca --basis-epsilon 1 \\
        --basis-delta 1e-5 --ledger ledger.db            # charged once, in the ledger
    privembed basis public.parquet -o basis.npz           # public data: exact PCA, no cost
    privembed index emb.parquet --store faiss --path store -m subspace --basis basis.npz ...

``index``/``protect --basis dp-pca`` fit a new DP-PCA basis (and charge it) each time they run;
a basis written here is fitted and charged once and reused by ``index``, ``protect`` and
``advise`` (``--basis basis.npz``), its guarantee composed into each release's. The work is
:func:`privembed.mechanisms.subspace.fit_basis`; this module parses and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import err_console, print_json, user_errors
from .options import (
    OptBasisDelta,
    OptBasisEpsilon,
    OptColumn,
    OptIdField,
    OptJsonSummary,
    OptLedger,
    OptLedgerTimeout,
    OptOverwriteFile,
    basis_flag,
    output_flag,
)


@user_errors
def basis(
    input: Annotated[
        Path,
        typer.Argument(
            help="The private embeddings (with --basis dp-pca), or public data (embeddings or "
            "texts) whose exact PCA is the basis."
        ),
    ],
    output: Annotated[Path, output_flag(help="Basis file to write (.npz).")],
    method: Annotated[
        str,
        basis_flag(
            help="'dp-pca' (DP-PCA of INPUT, charged once to every record in --ledger) or "
            "'public' (exact PCA of INPUT, which must be data that may be published).",
        ),
    ] = "public",
    basis_epsilon: OptBasisEpsilon = None,
    basis_delta: OptBasisDelta = None,
    ledger: OptLedger = None,
    ledger_timeout: OptLedgerTimeout = 60.0,
    column: OptColumn = None,
    id_column: OptIdField = None,
    overwrite: OptOverwriteFile = False,
    as_json: OptJsonSummary = False,
) -> None:
    """Fit a subspace basis once (DP-PCA charged once, or public data) and write it."""
    from ..mechanisms.subspace import fit_basis
    from ..release import open_ledger

    if method not in ("dp-pca", "public"):
        raise ValueError(f"--basis must be 'dp-pca' or 'public', got --basis {method!r}.")
    if method == "public" and ledger is not None:
        raise ValueError("a public basis costs no privacy: nothing to charge in --ledger.")
    spec = "dp-pca" if method == "dp-pca" else str(input)
    with open_ledger(ledger, timeout=ledger_timeout) as led:
        summary = fit_basis(
            spec, output, corpus=input, column=column, id_column=id_column,
            epsilon=basis_epsilon, delta=basis_delta, ledger=led, overwrite=overwrite,
        )  # fmt: skip
    if as_json:
        print_json(summary)
        return
    what = f"DP-PCA of {summary['records']:,} records" if method == "dp-pca" else "public data"
    err_console.print(
        f"wrote {output}: {summary['components']} components of d = {summary['dim']} ({what})",
        highlight=False,
    )
    if summary["guarantee"]:
        err_console.print(f"guarantee of the basis: {summary['guarantee']}", highlight=False)
    charge = summary["charge"]
    if charge:
        err_console.print(
            f"charged once in {ledger}: {charge['records']:,} records ({charge['fresh']:,} "
            "fresh); index/protect/advise --basis FILE reuse it without charging again",
            highlight=False,
        )
    elif method == "dp-pca":
        err_console.print(
            "no --ledger: the basis' release to these records is not recorded anywhere",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Attach the ``basis`` command to the main app."""
    app.command(name="basis")(basis)
