"""The basis a command names, and ``privembed basis``: a saved basis, public data or DP-PCA.

:func:`basis_from` resolves what ``--basis`` says (a basis file, public embeddings or texts whose
exact PCA is the basis, or ``dp-pca`` of the private corpus, charged in the ledger);
:func:`fit_basis` fits one once and writes it with its charge in the same commit. Both read
the corpus in one pass (:func:`_dp_pca_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core._validation import DataError
from .dp_pca import SecondMoments, charge_basis, dp_pca
from .subspace_basis import SubspaceBasis

__all__ = ["basis_from", "fit_basis"]


def basis_from(
    spec: Any,
    *,
    corpus: str | Path | None = None,
    column: str | None = None,
    id_column: str | None = None,
    model: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    ledger: Any = None,
    subject: str | None = None,
    max_components: int | None = None,
    batch_rows: int = 16384,
    rng: Any = None,
    charge_with_next_release: bool = False,
) -> SubspaceBasis:
    """The basis a command names: a saved basis, public data, or DP-PCA of the corpus.

    Parameters
    ----------
    spec : SubspaceBasis, path or "dp-pca"
        * a :class:`SubspaceBasis` or a file written by :meth:`SubspaceBasis.save`: itself;
        * another file: **public** data -- embeddings (``.parquet``/``.npz``/``.npy``/
          ``.jsonl``) or texts (embedded with ``model``) -- whose exact PCA is the basis (no
          privacy cost: use only data that may be published);
        * ``"dp-pca"``: :func:`dp_pca` of the private ``corpus`` (an embeddings file, read
          once here, once more by the release) at (``epsilon``, ``delta``), charged to every
          record of the corpus in ``ledger`` (:func:`charge_basis`) before it is returned.
    corpus : path
        The private embeddings (``"dp-pca"`` only).
    charge_with_next_release : bool
        Stage the DP-PCA charge and commit it with the first release the ledger commits
        (:func:`charge_basis` ``with_next_release``): a command that fails or is refused
        before that records nothing. The command must then release with this ledger object.

    Raises
    ------
    ValueError, DataError, FileNotFoundError
        A missing or unreadable file, DP-PCA without its parameters or corpus, a corpus of
        texts (embed it first: DP-PCA and the release both read the embeddings), a corpus
        without record ids when a ledger must charge them.
    """
    if isinstance(spec, SubspaceBasis):
        return spec
    if spec == "dp-pca":
        path = Path(corpus) if corpus is not None else None
        basis, ids = _dp_pca_of(
            path, column=column, id_column=id_column, epsilon=epsilon, delta=delta,
            max_components=max_components, rng=rng, batch_rows=batch_rows,
            with_ids=ledger is not None,
        )  # fmt: skip
        assert path is not None
        if ledger is not None:
            charge_basis(
                ledger, basis, ids, subject=subject, destination=f"basis of {path.name}",
                with_next_release=charge_with_next_release,
            )  # fmt: skip
        return basis
    if epsilon is not None or delta is not None:
        raise ValueError(
            "--basis-epsilon/--basis-delta apply to a DP-PCA basis (--basis dp-pca) only."
        )
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"basis not found: {path}")
    if SubspaceBasis.is_basis_file(path):
        return SubspaceBasis.load(path)
    return _public_basis(path, column=column, model=model, max_components=max_components)


def fit_basis(
    spec: Any,
    output: str | Path,
    *,
    corpus: str | Path | None = None,
    column: str | None = None,
    id_column: str | None = None,
    model: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    ledger: Any = None,
    subject: str | None = None,
    max_components: int | None = None,
    rng: Any = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fit a basis once and write it (``privembed basis``): index, protect, advise and search
    reuse the file (``--basis FILE``) and nothing refits or charges it again.

    ``spec`` is ``"dp-pca"`` (DP-PCA of the private ``corpus`` at (``epsilon``, ``delta``),
    charged once to every record of the corpus in ``ledger``, in the commit that publishes the
    file: no file without its charge, and a refused charge writes no file) or public data (as
    :func:`basis_from`: exact PCA, no privacy cost). The file keeps the DP-PCA guarantee, so
    every release with it prints the composition.

    Returns
    -------
    dict
        ``output``, ``components``, ``dim``, ``records`` (DP-PCA), ``guarantee`` (text or
        None) and ``charge`` (the ledger charge: ``records``, ``fresh``, ``free``, ``batch``;
        None without a ledger or for a public basis).

    Raises
    ------
    FileExistsError
        ``output`` exists and ``overwrite`` is False (checked first).
    privembed.keys.ledger.BudgetExceeded
        The charge would pass a budget: nothing is recorded, no file is written.
    """
    from ..data.io import atomic_output

    out = Path(output)
    if out.exists() and not overwrite:
        raise FileExistsError(f"output exists: {out} (pass --overwrite to replace it).")
    if spec == "dp-pca":
        basis, ids = _dp_pca_of(
            None if corpus is None else Path(corpus), column=column, id_column=id_column,
            epsilon=epsilon, delta=delta, max_components=max_components, rng=rng,
            batch_rows=16384, with_ids=ledger is not None,
        )  # fmt: skip
    else:
        basis = basis_from(spec, model=model, epsilon=epsilon, delta=delta, column=column)
        ids = []
    charge: dict[str, Any] = {}

    def commit() -> None:
        charge.update(
            charge_basis(ledger, basis, ids, subject=subject, destination=str(out.resolve()))
        )

    charged = ledger is not None and basis.guarantee is not None
    with atomic_output(out, commit=commit if charged else None, overwrite=overwrite) as tmp:
        Path(tmp).write_bytes(basis.to_bytes())
    return {
        "output": str(out),
        "components": basis.size,
        "dim": basis.dim,
        "records": basis.n_records,
        "guarantee": None if basis.guarantee is None else basis.guarantee.describe(),
        "charge": charge or None,
    }


def _dp_pca_of(
    path: Path | None,
    *,
    column: str | None,
    id_column: str | None,
    epsilon: float | None,
    delta: float | None,
    max_components: int | None,
    rng: Any,
    batch_rows: int,
    with_ids: bool,
) -> tuple[SubspaceBasis, list[Any]]:
    """DP-PCA of the private embeddings at ``path`` (one pass) and, ``with_ids``, their ids."""
    if epsilon is None or delta is None:
        raise ValueError(
            "a DP-PCA basis needs its privacy parameters: --basis-epsilon and --basis-delta."
        )
    if path is None:
        raise ValueError("a DP-PCA basis is computed from the corpus: give its embeddings.")
    acc, ids = _corpus_moments(
        path, column=column, id_column=id_column, batch_rows=batch_rows, with_ids=with_ids
    )
    basis = dp_pca(
        acc, epsilon=epsilon, delta=delta, max_components=max_components, rng=rng,
        metadata={"corpus": path.name},
    )  # fmt: skip
    return basis, ids


def _corpus_moments(
    path: Path, *, column: str | None, id_column: str | None, batch_rows: int, with_ids: bool
) -> tuple[SecondMoments, list[Any]]:
    """One pass over a private embeddings file: its second moments and (``with_ids``) its ids."""
    from ..data import io

    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    if io.holds_texts(path):
        raise DataError(
            f"{path.name} holds texts: DP-PCA and the release both read the corpus' "
            "embeddings, so embed it first (privembed embed) and index the embeddings."
        )
    _n, _d, _, batches = io.iter_batches(
        path, batch_rows=batch_rows, column=column, id_column=id_column
    )
    acc: SecondMoments | None = None
    ids: list[Any] = []
    for b in batches:
        if acc is None:
            acc = SecondMoments(b.X.shape[1])
        acc.add(b.X)
        if with_ids:
            if b.ids is None:
                raise DataError(
                    f"{path.name} has no record ids; the ledger charges the DP-PCA basis to "
                    "every record by id (--id-field)."
                )
            ids.extend(b.ids)
    if acc is None:
        raise DataError(f"{path.name} holds no rows.")
    return acc, ids


def _public_basis(
    path: Path, *, column: str | None, model: str | None, max_components: int | None
) -> SubspaceBasis:
    """The exact PCA basis of public data: an embeddings file, or texts embedded with ``model``."""
    from ..data import io

    if io.holds_texts(path):
        from ..data.embedders import Embedder

        texts = io.read_text_table(path).texts
        emb = Embedder(model)
        X = emb.encode(texts)
        meta = {"public_data": path.name, "embedding_model": emb.metadata().get("embedding_model")}
    else:
        table = io.read_embeddings(path, column=column)
        X = table.X
        meta = {"public_data": path.name, "embedding_model": table.metadata.get("embedding_model")}
    return SubspaceBasis.from_embeddings(X, max_components=max_components, metadata=meta)
