"""The basis a command names, and ``privembed basis``: a saved basis, public data or DP-PCA.

:func:`basis_from` resolves what ``--basis`` says (a basis file, public embeddings or texts whose
exact PCA is the basis, or ``dp-pca`` of the private corpus, charged in the ledger);
:func:`fit_basis` fits one once and writes it with its charge in the same commit. Both read
the corpus in one pass (:func:`_dp_pca_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict, Unpack

from ..core._validation import DataError, check_keywords
from .dp_pca import SecondMoments, charge_basis, dp_pca
from .subspace_basis import SubspaceBasis

__all__ = ["BasisSource", "basis_from", "fit_basis"]


class BasisSource(TypedDict, total=False):
    """What a basis is fitted from and charged to: the keywords :func:`basis_from` and
    :func:`fit_basis` share (all optional: an absent one is None).

    Attributes
    ----------
    corpus : path
        The private embeddings (``"dp-pca"`` only).
    column, id_column : str
        The embeddings' column (the corpus' or public data's) and the corpus' record-id column.
    model : str
        The embedding model of public texts.
    epsilon, delta : float
        DP-PCA's privacy parameters (``"dp-pca"`` only).
    ledger : Ledger
        Where a DP-PCA basis is charged to every record of the corpus (by id).
    subject : str
        The subject the charge is recorded for.
    max_components : int
        The most components the basis keeps.
    rng : seed or Generator
        DP-PCA's noise.
    """

    corpus: str | Path | None
    column: str | None
    id_column: str | None
    model: str | None
    epsilon: float | None
    delta: float | None
    ledger: Any
    subject: str | None
    max_components: int | None
    rng: Any


def basis_from(
    spec: Any,
    *,
    batch_rows: int = 16384,
    charge_with_next_release: bool = False,
    **source: Unpack[BasisSource],
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
    batch_rows : int
        Rows read at a time from the corpus (``"dp-pca"``).
    charge_with_next_release : bool
        Stage the DP-PCA charge and commit it with the first release the ledger commits
        (:func:`charge_basis` ``with_next_release``): a command that fails or is refused
        before that records nothing. The command must then release with this ledger object.
    **source
        :class:`BasisSource`: ``corpus`` (the private embeddings, ``"dp-pca"`` only),
        ``column``, ``id_column``, ``model``, ``epsilon``, ``delta``, ``ledger``, ``subject``,
        ``max_components``, ``rng``.

    Raises
    ------
    ValueError, DataError, FileNotFoundError
        A missing or unreadable file, DP-PCA without its parameters or corpus, a corpus of
        texts (embed it first: DP-PCA and the release both read the embeddings), a corpus
        without record ids when a ledger must charge them.
    """
    check_keywords("basis_from", source, BasisSource)
    if isinstance(spec, SubspaceBasis):
        return spec
    if spec == "dp-pca":
        basis, ids, path = _dp_pca_of(source, batch_rows=batch_rows)
        if (ledger := source.get("ledger")) is not None:
            charge_basis(
                ledger, basis, ids, subject=source.get("subject"),
                destination=f"basis of {path.name}", with_next_release=charge_with_next_release,
            )  # fmt: skip
        return basis
    if source.get("epsilon") is not None or source.get("delta") is not None:
        raise ValueError(
            "--basis-epsilon/--basis-delta apply to a DP-PCA basis (--basis dp-pca) only."
        )
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"basis not found: {path}")
    if SubspaceBasis.is_basis_file(path):
        return SubspaceBasis.load(path)
    return _public_basis(
        path, column=source.get("column"), model=source.get("model"),
        max_components=source.get("max_components"),
    )  # fmt: skip


def fit_basis(
    spec: Any, output: str | Path, *, overwrite: bool = False, **source: Unpack[BasisSource]
) -> dict[str, Any]:
    """Fit a basis once and write it (``privembed basis``): index, protect, advise and search
    reuse the file (``--basis FILE``) and nothing refits or charges it again.

    ``spec`` is ``"dp-pca"`` (DP-PCA of the private ``corpus`` at (``epsilon``, ``delta``),
    charged once to every record of the corpus in ``ledger``, in the commit that publishes the
    file: no file without its charge, and a refused charge writes no file) or public data (as
    :func:`basis_from`: exact PCA, no privacy cost). The file keeps the DP-PCA guarantee, so
    every release with it prints the composition. ``**source`` are :class:`BasisSource`'s
    keywords, as for :func:`basis_from`.

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

    check_keywords("fit_basis", source, BasisSource)
    out = Path(output)
    if out.exists() and not overwrite:
        raise FileExistsError(f"output exists: {out} (pass --overwrite to replace it).")
    ledger = source.get("ledger")
    if spec == "dp-pca":
        basis, ids, _ = _dp_pca_of(source, batch_rows=16384)
    else:
        basis = basis_from(
            spec, model=source.get("model"), epsilon=source.get("epsilon"),
            delta=source.get("delta"), column=source.get("column"),
        )  # fmt: skip
        ids = []
    charge: dict[str, Any] = {}

    def commit() -> None:
        charge.update(
            charge_basis(
                ledger, basis, ids, subject=source.get("subject"), destination=str(out.resolve())
            )
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


def _dp_pca_of(source: BasisSource, *, batch_rows: int) -> tuple[SubspaceBasis, list[Any], Path]:
    """DP-PCA of the private embeddings ``source["corpus"]`` (one pass), their ids (when a
    ledger will charge them) and the corpus' path."""
    epsilon, delta = source.get("epsilon"), source.get("delta")
    if epsilon is None or delta is None:
        raise ValueError(
            "a DP-PCA basis needs its privacy parameters: --basis-epsilon and --basis-delta."
        )
    if (corpus := source.get("corpus")) is None:
        raise ValueError("a DP-PCA basis is computed from the corpus: give its embeddings.")
    path = Path(corpus)
    acc, ids = _corpus_moments(
        path, column=source.get("column"), id_column=source.get("id_column"),
        batch_rows=batch_rows, with_ids=source.get("ledger") is not None,
    )  # fmt: skip
    basis = dp_pca(
        acc, epsilon=epsilon, delta=delta, max_components=source.get("max_components"),
        rng=source.get("rng"), metadata={"corpus": path.name},
    )  # fmt: skip
    return basis, ids, path


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
