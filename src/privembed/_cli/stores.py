"""``privembed index|search|protect-stream|protect-shards``: vector stores, pipes and shards.

Thin wrappers over :mod:`privembed.integrations`; registered on the main app by
:func:`register`. Heavy dependencies (Chroma, Qdrant, FAISS, Ray, the embedding model) are
imported only when a command runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from ._groups import (
    LedgerOptions,
    PayloadOptions,
    Report,
    ShardEngine,
    StreamFormats,
)
from .common import (
    IndexMechanismName,
    MechanismName,
    OptDelta,
    OptEpsilon,
    OptionGroup,
    OptMask,
    OptSigma,
    console,
    err_console,
    print_json,
    user_errors,
    with_option_groups,
)
from .common import (
    StoreKind as StoreName,
)
from .options import (
    OptAllowReprotect,
    OptBasis,
    OptBasisDelta,
    OptBasisEpsilon,
    OptBatchRows,
    OptColumn,
    OptIdField,
    OptKeyFile,
    OptOverwriteFolder,
    OptSeed,
    OptTextField,
    allow_reprotect_flag,
    id_field_flag,
    ids_from_content_flag,
    json_flag,
    keep_field_flag,
    ledger_flag,
    mechanism_flag,
    model_flag,
    output_flag,
    seed_flag,
)

__all__ = ["register"]

# ---- the options of these commands (the ones other commands share: options.py, common.py) -----
Mechanism = Annotated[MechanismName | None, mechanism_flag(help="The privacy mechanism.")]
IndexMechanism = Annotated[
    IndexMechanismName | None,
    mechanism_flag(help="The privacy mechanism ('none': the vectors are protected)."),
]
Params = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-p",
        help="Other mechanism parameter NAME=VALUE, repeatable (e.g. -p k=64 -p kind=srht "
        "-p renormalize=false).",
    ),
]
StoreKind = Annotated[StoreName, typer.Option("--store", help="The vector store.")]
StorePath = Annotated[Path, typer.Option("--path", help="Database folder.")]
Collection = Annotated[str, typer.Option(help="Collection name.")]


def _parse_params(mechanism: str, items: list[str] | None) -> dict[str, Any]:
    """``-p NAME=VALUE`` items, each value converted by the type the mechanism declares."""
    from ..mechanisms import parse_parameter

    out: dict[str, Any] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--param must look like NAME=VALUE, got --param={item!r}.")
        key = name.strip().replace("-", "_")
        out[key] = parse_parameter(mechanism, key, value.strip())
    return out


@dataclass
class MechanismParams(OptionGroup):
    """The parameters of the mechanism of index, protect-stream and protect-shards: epsilon,
    delta, sigma, a mask, and any other as ``-p NAME=VALUE``."""

    epsilon: OptEpsilon = None
    delta: OptDelta = None
    sigma: OptSigma = None
    param: Params = None
    mask: OptMask = None

    def build(self, name: str, *, basis: Any = None) -> Any:
        """Mechanism ``name`` with these parameters (``-p`` ones passed through)."""
        from ..mechanisms import build_mechanism

        kw = _parse_params(name, self.param)
        for k, v in (("epsilon", self.epsilon), ("delta", self.delta), ("sigma", self.sigma),
                     ("mask", self.mask), ("basis", basis)):  # fmt: skip
            if v is not None:
                kw[k] = v
        return build_mechanism(name, **kw)


@dataclass
class BasisOptions(OptionGroup):
    """The basis of ``-m subspace`` (protect, index): public data, a saved basis, or DP-PCA of
    the input with its own central epsilon and delta."""

    basis: OptBasis = None
    basis_epsilon: OptBasisEpsilon = None
    basis_delta: OptBasisDelta = None

    def check(self, mechanism: str | None) -> None:
        """Refuse basis options for a mechanism that takes no basis, and a mechanism that needs
        one without it (which mechanisms: read from their constructors, ``needs("basis")``)."""
        from ..mechanisms import MECHANISMS
        from ..mechanisms.params import takers

        cls = MECHANISMS.get(mechanism or "")
        takes = cls is not None and "basis" in cls.parameter_names()
        if not takes and any(v is not None for v in self.given().values()):
            which = ", ".join(f"-m {n}" for n in takers("basis"))
            raise ValueError(
                f"--basis/--basis-epsilon/--basis-delta apply to {which}, got -m {mechanism}."
            )
        if cls is not None and cls.needs("basis") and self.basis is None:
            raise ValueError(
                f"-m {mechanism} needs a basis: --basis PUBLIC_DATA (embeddings or texts), a "
                "saved basis, or --basis dp-pca with --basis-epsilon and --basis-delta."
            )

    def fit(
        self, corpus: Path, ledger: Any, *, column: str | None, id_column: str | None,
        model: str | None,
    ) -> Any:  # fmt: skip
        """The basis ``--basis`` names (None without one): read, or fitted on ``corpus`` -- a
        DP-PCA basis charged to every record in ``ledger``, an open ledger (the command's), in
        the transaction of the first release the command commits with it: the basis and its
        first use are one unit, and a command refused or failing before then records neither
        (:func:`privembed.mechanisms.subspace.charge_basis`)."""
        if self.basis is None:
            return None
        from ..mechanisms.subspace import basis_from

        return basis_from(
            self.basis, corpus=corpus, column=column, id_column=id_column, model=model,
            epsilon=self.basis_epsilon, delta=self.basis_delta, ledger=ledger,
            charge_with_next_release=True,
        )  # fmt: skip


#: the least dimension of a collection whose payloads carry a --recall profile (the profile's
#: score law, :class:`privembed.search.rerank.ScoreProfile`, needs d >= 3)
PROFILE_MIN_DIM = 3


def check_index_dimension(mech: Any, basis: Any, *, payloads: bool) -> None:
    """Refuse, before anything is charged or written, a subspace too small for what the index
    builds: with payloads, a --recall profile needs :data:`PROFILE_MIN_DIM` dimensions. The
    message says where k came from (a DP-PCA basis keeps the components above its noise
    floor) and what would give more."""
    if basis is None or not payloads:
        return
    k = mech.output_dim(basis.dim)
    if k < PROFILE_MIN_DIM:
        raise ValueError(basis.too_few(k, PROFILE_MIN_DIM, "the --recall profile of --payloads"))


def _randomness(
    key_file: Path | None, seed: int | None, ledger: str | None = None
) -> dict[str, Any]:
    """The key and the seed of a release, as its keyword arguments ``key`` and ``rng``: one of
    them, never both, and no seed with a ledger."""
    from ..release import check_randomness

    check_randomness(
        key_file, seed, ledger=ledger, key_name="--key-file", rng_name="--seed"
    )  # before reading
    return {"key": _key(key_file), "rng": seed if key_file is None else None}


def _key(key_file: Path | None) -> bytes | None:
    """The secret key ``--key-file`` names (None without one)."""
    if key_file is None:
        return None
    from ..keys.keyed import load_key

    return load_key(key_file)


# ---- index ------------------------------------------------------------------------------------
IndexInput = Annotated[
    Path, typer.Argument(help="Embeddings (.parquet/.npz/.jsonl/.npy), plain or protected.")
]
MetadataFields = Annotated[
    list[str] | None,
    typer.Option(
        "--metadata-field",
        help="Parquet column to store as record metadata, repeatable. Nothing else is "
        "sent: a text column stored next to protected vectors gives the text away.",
    ),
]


@dataclass
class IndexFields(OptionGroup):
    """Where index reads its input: the embedding column, the ids, and the columns it stores as
    each record's metadata."""

    column: OptColumn = None
    id_column: OptIdField = None
    metadata_column: MetadataFields = None

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of
        :func:`~privembed.integrations.collection.index_file`."""
        return {"column": self.column, "id_column": self.id_column,
                "metadata_columns": self.metadata_column}  # fmt: skip


IndexModel = Annotated[
    str | None, model_flag(help="Embedding model, if the file does not record it.")
]
IndexIdsFromContent = Annotated[
    bool, ids_from_content_flag(help="Derive record ids from the texts (inputs without ids).")
]
ProfileQueries = Annotated[
    Path | None,
    typer.Option(
        help="Real queries (texts or embeddings) for the profile that --recall plans k' "
        "from (default: documents diluted into pseudo-queries, calibrated on one task; "
        "real queries are better)."
    ),
]
FaissIndex = Annotated[
    str | None,
    typer.Option(
        "--faiss-index",
        help="FAISS index of a new FAISS store (an index_factory string): 'Flat' (the "
        "default, exact float32 scan), 'SQfp16' (half-precision vectors: half the memory, "
        "a faster scan, the candidates of a re-rank unchanged in practice), 'HNSW32' "
        "(approximate). Only --store faiss.",
    ),
]


Sealed = Annotated[
    bool,
    typer.Option(
        "--sealed",
        help="Store no vector: each record's exact vector (its text with --store-text, its "
        "--metadata-field columns) sealed with the key (AES-256-GCM, padded) beside a "
        "constant placeholder; search fetches the payloads and ranks them exactly on your "
        "side. Needs --key-file; takes no mechanism, noise, ledger or profile option.",
    ),
]


def index(
    *,
    input: IndexInput,
    store: StoreKind = "chroma",
    path: StorePath = Path("privembed-db"),
    collection: Collection = "privembed",
    mechanism: IndexMechanism = None,
    params: MechanismParams,
    key_file: OptKeyFile = None,
    seed: OptSeed = None,
    fields: IndexFields,
    model: IndexModel = None,
    batch_rows: OptBatchRows = 4096,
    allow_reprotect: OptAllowReprotect = False,
    ledger_options: LedgerOptions,
    payload: PayloadOptions,
    sealed: Sealed = False,
    text_field: OptTextField = "text",
    ids_from_content: IndexIdsFromContent = False,
    profile_queries: ProfileQueries = None,
    basis: BasisOptions,
    faiss_index: FaissIndex = None,
    report: Report,
) -> None:
    """Protect embeddings -- or texts, embedded first -- and upsert them into a vector store
    (Chroma embedded by default).

    Already-protected files (privembed protect) are indexed as they are, under the
    configuration they record. Plain vectors need --mechanism (or --mechanism none), or
    --sealed (no vector in the store at all).
    """
    if sealed:  # payloads only: no mechanism, noise, ledger or profile (a path of its own)
        refused = {
            "--mechanism": mechanism, **params.given(), "--seed": seed,
            **ledger_options.given(), **basis.given(), "--profile-queries": profile_queries,
            "--allow-reprotect": allow_reprotect, "--faiss-index": faiss_index,
        }  # fmt: skip
        return _index_sealed(
            input, store, path, collection, refused=refused, key_file=key_file,
            report=report, **fields.kwargs(), model=model, batch_rows=batch_rows,
            **payload.sealing(), text_field=text_field, ids_from_content=ids_from_content,
        )  # fmt: skip
    from ..data.io import check_input_format
    from ..integrations.collection import index_file
    from .common import progress_callback

    check_input_format(input)  # embeddings or texts: the message lists both
    if faiss_index is not None and store != "faiss":
        raise ValueError(f"--faiss-index applies to --store faiss, not --store {store}.")
    randomness = _randomness(key_file, seed, ledger_options.ledger)
    basis.check(mechanism)
    mech: Any = mechanism
    with (
        ledger_options.open() as led,
        progress_callback("indexing") as (set_total, advance),
    ):
        if mechanism not in (None, "none"):
            subspace = basis.fit(
                input, led, column=fields.column, id_column=fields.id_column, model=model
            )
            mech = params.build(mechanism, basis=subspace)
            check_index_dimension(mech, subspace, payloads=payload.payloads)
        res = index_file(
            input, store, path, collection, mechanism=mech, **randomness, ledger=led,
            **fields.kwargs(), model=model,
            batch_rows=batch_rows, allow_reprotect=allow_reprotect,
            payloads=payload.payloads, **payload.sealing(),
            text_field=text_field, ids_from_content=ids_from_content,
            profile_queries=200 if profile_queries is None else profile_queries,
            store_options=None if faiss_index is None else {"factory": faiss_index},
            on_start=set_total, on_batch=advance,
        )  # fmt: skip
    _report_indexed(res, mech, store, path, collection, report)


def _index_sealed(
    input: Path,
    store: str,
    path: Path,
    collection: str,
    *,
    refused: dict[str, Any],
    key_file: Path | None,
    report: Report,
    **options: Any,
) -> None:
    """``index --sealed``: refuse, in one line, the options that do not apply, then
    :func:`~privembed.integrations.collection.index_file` with ``mechanism="sealed"``."""
    from ..data.io import check_input_format
    from ..integrations.collection import index_file
    from .common import progress_callback

    given = [name for name, value in refused.items() if value not in (None, False, [])]
    if given:
        raise ValueError(
            f"--sealed stores sealed payloads and no vector: {', '.join(given)} "
            f"{'does' if len(given) == 1 else 'do'} not apply (no mechanism, noise, ledger or "
            "k' profile)."
        )
    if key_file is None:
        raise ValueError("--sealed seals every record with your key: give --key-file.")
    check_input_format(input)
    key = _key(key_file)
    with progress_callback("indexing") as (set_total, advance):
        res = index_file(
            input, store, path, collection, mechanism="sealed", key=key,
            on_start=set_total, on_batch=advance, **options,
        )  # fmt: skip
    _report_indexed(res, "sealed", store, path, collection, report)


def _report_indexed(
    res: dict[str, Any],
    mech: Any,
    store: str,
    path: Path,
    collection: str,
    report: Report,
) -> None:
    """index's summary: JSON on stdout, or what was indexed, under which guarantee, how queries
    are treated, the payloads and the setting's expected utility on stderr."""
    rows, n, total = res["rows"], res["n"], res["total"]
    treat, guarantee = res["treatment"], res["guarantee"]
    note = res["setting"]  # computed by index_file (privembed.release.setting)
    if report.as_json:
        print_json({**res, "setting": None if note is None else note.to_dict()})
        return
    if report.quiet:
        return
    err_console.print(
        f"indexed {rows} of {n} vectors into {store} collection {collection!r} at {path} "
        f"({total} in total)",
        highlight=False,
    )
    err_console.print(f"guarantee: {guarantee}", highlight=False)
    sub = mech.release_metadata(res["dim"]).get("subspace") if note is not None else None
    if sub:
        err_console.print(f"basis: {sub['basis']}", highlight=False)
        err_console.print(f"composed: {sub['composed_guarantee']}", highlight=False)
    err_console.print(f"query treatment: {treat}", highlight=False)
    if res.get("sealed"):
        err_console.print(
            "sealed: the store holds payloads and one placeholder vector per record; search "
            "with --key-file fetches every payload and ranks them exactly on your side (kept "
            "in an encrypted cache beside the store until it changes)",
            highlight=False,
        )
    elif res.get("payloads"):
        err_console.print(
            "payloads: exact vectors sealed with the key (AES-256-GCM); search with "
            "--key-file and --rerank K' or --recall 0.95 for exact re-ranking",
            highlight=False,
        )
        if res.get("profile") == "documents":
            err_console.print(
                "[yellow]note:[/yellow] the --recall profile uses pseudo-queries made from "
                "documents (calibrated on one task: recall within 0.03 of its target there); "
                "give real queries (--profile-queries) for a k' that fits yours.",
                highlight=False,
            )
    if note is not None:
        from ..release import charge_text

        err_console.print(charge_text(mech), highlight=False)
        err_console.print(note.summary(), highlight=False)
        for line in note.notes:
            err_console.print(f"[yellow]note:[/yellow] {line}", highlight=False)


# ---- search -----------------------------------------------------------------------------------
Queries = Annotated[
    list[str] | None,
    typer.Argument(help="Query text(s); '-' reads one query per line from stdin."),
]
QueriesFile = Annotated[
    Path | None, typer.Option(help="A file of queries, one per line (or '-' for stdin).")
]
QueryEmbeddings = Annotated[
    Path | None,
    typer.Option(help="Query embeddings file instead of texts (plain, unprotected)."),
]


@dataclass
class Reranking(OptionGroup):
    """Exact re-ranking inside the trust boundary: K' candidates fetched, their payloads opened
    with the key -- K' given, or planned for a recall of the top k."""

    rerank: Annotated[
        int | None,
        typer.Option(
            help="Fetch K' candidates by protected similarity, open their payloads with the "
            "key and re-rank them by exact cosine."
        ),
    ] = None
    recall: Annotated[
        float | None,
        typer.Option(help="Re-rank with the K' that theory gives for this recall of the top k."),
    ] = None


@dataclass
class QueryProtection(OptionGroup):
    """The mechanism that protects each query before it reaches the store (none by default)."""

    query_mechanism: Annotated[
        MechanismName | None,
        typer.Option(
            help="Protect the query before it reaches the store (RemoteRAG), with --query-epsilon."
        ),
    ] = None
    query_epsilon: Annotated[float | None, typer.Option(help="epsilon of --query-mechanism.")] = (
        None
    )

    def build(self) -> Any:
        """The mechanism --query-mechanism names, with --query-epsilon (None without one)."""
        if self.query_mechanism is None:
            return None
        from ..mechanisms import build_mechanism

        return build_mechanism(self.query_mechanism, epsilon=self.query_epsilon)


HitTexts = Annotated[
    Path | None,
    typer.Option(help="JSONL of {'id', 'text'} kept locally, to show hits' texts."),
]
BatchQueries = Annotated[
    int | None,
    typer.Option(
        help="Queries searched together (default: as many as keep their K' candidates "
        "within 160 MiB, so memory follows K' and the dimension, not the number of queries)."
    ),
]
SealedCache = Annotated[
    bool,
    typer.Option(
        "--sealed-cache/--no-sealed-cache",
        help="A sealed collection: keep the index of its opened payloads in a file beside the "
        "store, encrypted with the key, so that the next search fetches nothing while the "
        "store is unchanged.",
    ),
]
ReadOnlyLedger = Annotated[
    str | None,
    ledger_flag(
        help="The ledger the collection was indexed under (read only): re-ranking refuses "
        "a payload of an older release of its record (a store that rolled it back)."
    ),
]


def search(
    *,
    query: Queries = None,
    store: StoreKind = "chroma",
    path: StorePath = Path("privembed-db"),
    collection: Collection = "privembed",
    k: Annotated[int, typer.Option("-k", "--k", help="Hits per query.")] = 10,
    queries: QueriesFile = None,
    model: Annotated[
        str | None, model_flag(help="Embedding model (default: the collection's).")
    ] = None,
    query_embeddings: QueryEmbeddings = None,
    key_file: OptKeyFile = None,
    reranking: Reranking,
    protection: QueryProtection,
    texts: HitTexts = None,
    batch_queries: BatchQueries = None,
    as_json: Annotated[
        bool, json_flag(help="Print JSON Lines: one object per query, one per line.")
    ] = False,
    ledger: ReadOnlyLedger = None,
    sealed_cache: SealedCache = True,
) -> None:
    """Search a protected collection: print each hit's id, its cosine (labelled as what it is)
    and its text. The model stays loaded across queries: give several, a file, or stdin.

    A sealed collection (index --sealed) needs --key-file: its payloads are fetched and ranked
    exactly here (--rerank/--recall are exact already and ignored)."""
    from ..integrations.collection import Searcher

    labels, from_stdin = _query_texts(query, queries)
    if sum(bool(x) for x in (labels or from_stdin, query_embeddings is not None)) != 1:
        raise ValueError(
            "give query text(s), --queries or '-' (stdin), or --query-embeddings -- not both "
            "or neither."
        )
    if batch_queries is not None and batch_queries < 1:
        raise ValueError(f"--batch-queries must be >= 1, got --batch-queries={batch_queries}.")
    if query_embeddings is not None and not query_embeddings.exists():
        raise FileNotFoundError(f"file not found: {query_embeddings}")
    qmech = protection.build()
    key = _key(key_file)
    opts: dict[str, Any] = {**dataclasses.asdict(reranking), "protect_query": qmech}
    led = _read_only_ledger(ledger)
    session: dict[str, Any] = {"key": key, "model": model, "texts": texts, "ledger": led}
    with (
        contextlib.closing(led) if led is not None else contextlib.nullcontext(),
        Searcher(store, path, collection, sealed_cache=sealed_cache, **session) as s,
    ):
        opts["batch_queries"] = batch_queries or s.batch_size(k, **opts)  # checks rerank/recall/key
        emit = _batch_printer(
            s, store, collection, recall=reranking.recall, as_json=as_json, k=k, opts=opts
        )
        _search_given(s, k, opts, labels, query_embeddings, emit)
        if from_stdin:
            for line in sys.stdin:  # the model stays warm: one query at a time, answered at once
                if line.strip():
                    emit(s.search([line.strip()], k, **opts))


def _query_texts(query: list[str] | None, queries: Path | None) -> tuple[list[str], bool]:
    """The query texts given as arguments and in the --queries file, and whether more come
    from stdin (a query or a --queries of '-')."""
    labels = list(query or [])
    from_stdin = labels == ["-"] or (queries is not None and str(queries) == "-")
    if labels == ["-"]:
        labels = []
    if queries is not None and not from_stdin:
        if not queries.exists():
            raise FileNotFoundError(f"file not found: {queries}")
        labels += [
            ln.strip() for ln in queries.read_text(encoding="utf-8").splitlines() if ln.strip()
        ]
    return labels, from_stdin


def _read_only_ledger(ledger: str | None) -> Any:
    """The existing ledger search checks payloads against (None without --ledger)."""
    if ledger is None:
        return None
    from ..keys.ledger import open_existing

    return open_existing(ledger)


def _batch_printer(
    s: Any,
    store: str,
    collection: str,
    *,
    recall: float | None,
    as_json: bool,
    k: int = 10,
    opts: dict[str, Any] | None = None,
) -> Callable[[Any], None]:
    """``emit(results)``: print a batch's results; the collection's header first, once a batch
    has succeeded (a refused query prints nothing but its error)."""
    said = False

    def emit(results: Any) -> None:
        nonlocal said
        if not said and not as_json:
            err_console.print(
                f"{store} collection {collection!r}: {s.collection.store.count()} vectors; "
                f"query treatment: {s.collection.treatment.description}",
                highlight=False,
            )
            o = opts or {}
            plan = s.collection.fetch_plan(
                k, rerank=o.get("rerank"), recall=o.get("recall"),
                protect_query=o.get("protect_query"),
            )  # fmt: skip
            if plan is not None and plan["sealed"]:
                err_console.print(
                    f"sealed: every one of the {plan['depth']:,} payloads fetched "
                    f"({plan['bytes'] / 1e6:.2f} MB; once per session with the cache) and "
                    "ranked exactly here",
                    highlight=False,
                )
            elif plan is not None:
                why = f" for --recall {recall:g}" if recall is not None else ""
                err_console.print(
                    f"k' = {plan['depth']:,} candidates per query{why}: {plan['payloads']:,} "
                    f"payloads opened, {plan['bytes'] / 1e6:.2f} MB fetched per query "
                    "(vectors, payloads, ids)",
                    highlight=False,
                )
            if recall is not None and s.collection.profile_source == "documents":
                err_console.print(
                    "[yellow]note:[/yellow] k' for --recall was planned on pseudo-queries made "
                    "from documents (index --profile-queries gives real ones); the recall "
                    "reached may differ from the target where your queries differ from its "
                    "calibration.",
                    highlight=False,
                )
        said = True
        _print_results(results, as_json)

    return emit


def _search_given(
    s: Any,
    k: int,
    opts: dict[str, Any],
    labels: list[str],
    query_embeddings: Path | None,
    emit: Callable[[Any], None],
) -> None:
    """Search the queries given up front -- query embeddings, or texts -- ``opts["batch_queries"]``
    at a time, printing each batch's results as it comes: nothing accumulates over a long query
    file. A progress bar on a terminal."""
    from .common import progress_callback

    step = opts["batch_queries"]
    with progress_callback("searching", unit="queries", redirect_stdout=sys.stdout.isatty()) as (
        set_total,
        advance,
    ):
        if query_embeddings is not None:
            from ..data.io import iter_batches

            n, _dim, _meta, batches = iter_batches(query_embeddings, batch_rows=step)
            set_total(n)
            for b in batches:
                nb = int(b.X.shape[0])
                ids = list(b.ids) if b.ids is not None else list(range(b.start, b.start + nb))
                emit(s.search_vectors(b.X, k, labels=ids, **opts))
                advance(nb)
        elif labels:
            if len(labels) > step:
                set_total(len(labels))
            for start in range(0, len(labels), step):
                chunk = labels[start : start + step]
                emit(s.search(chunk, k, **opts))
                advance(len(chunk))


def _print_results(results: Any, as_json: bool) -> None:
    """Results as tables, or as JSON Lines (one object per query)."""
    if as_json:
        sys.stdout.write("".join(json.dumps(r.to_dict(), default=str) + "\n" for r in results))
        sys.stdout.flush()
        return
    from rich.table import Table

    for r in results:
        t = Table(title=f"query: {r.query}")
        t.add_column("rank", justify="right")
        t.add_column("id", overflow="fold")
        estimate = r.intervals is not None
        t.add_column(f"{r.score_kind} [95% interval]" if estimate else r.score_kind,
                     justify="right")  # fmt: skip
        t.add_column("text", overflow="fold")
        t.add_column("metadata", overflow="fold")
        for rank, h in enumerate(r.hits, start=1):
            score = f"{h.score:.4f}"
            if estimate:
                lo, hi = r.intervals[rank - 1]
                score += f" [{lo:.2f}, {hi:.2f}]"
            t.add_row(
                str(rank),
                h.id,
                score,
                h.text or "",
                json.dumps(h.metadata) if h.metadata else "",
            )
        console.print(t)
    sys.stdout.flush()


# ---- protect-stream ---------------------------------------------------------------------------
def protect_stream(
    *,
    mechanism: Mechanism = None,
    params: MechanismParams,
    key_file: OptKeyFile = None,
    seed: OptSeed = None,
    formats: StreamFormats,
    input: Annotated[
        Path | None, typer.Option("--input", "-i", help="Read this file instead of stdin.")
    ] = None,
    output: Annotated[Path | None, output_flag()] = None,
    batch_rows: OptBatchRows = 1024,
    ledger_options: LedgerOptions,
    keep_field: Annotated[
        list[str] | None,
        keep_field_flag(
            help="Copy this other JSONL field into the output as it is, unprotected "
            "(repeatable; other fields besides id are dropped).",
        ),
    ] = None,
) -> None:
    """Protect embeddings from stdin to stdout (JSONL lines or one .npy) for shell pipelines."""
    from ..integrations.stream import protect_stream as run

    if mechanism is None or mechanism == "none":
        raise ValueError("--mechanism is required (protect-stream always protects).")
    randomness = _randomness(key_file, seed, ledger_options.ledger)
    mech = params.build(mechanism)
    with contextlib.ExitStack() as stack:
        led = stack.enter_context(ledger_options.open())
        src: IO[bytes]
        dst: IO[bytes]
        if input is not None:
            if not input.exists():
                raise FileNotFoundError(f"file not found: {input}")
            src = stack.enter_context(input.open("rb"))
        else:
            src = sys.stdin.buffer
        if output is not None:
            from ..data.io import atomic_output

            tmp = stack.enter_context(atomic_output(output, src=input))
            dst = stack.enter_context(tmp.open("wb"))
        else:
            dst = sys.stdout.buffer
        summary = run(
            src,
            dst,
            mech,
            **randomness,
            **dataclasses.asdict(formats),
            batch_rows=batch_rows,
            ledger=led,
            keep_fields=keep_field or (),
        )
    err_console.print(
        f"{_protected(summary)}; guarantee: {mech.guarantee.describe()}", highlight=False
    )


# ---- protect-shards ---------------------------------------------------------------------------
def protect_shards(
    *,
    inputs: Annotated[
        list[str], typer.Argument(help="Parquet shards: folder(s), glob pattern(s) or files.")
    ],
    output: Annotated[Path, output_flag(help="Output folder.")],
    mechanism: Mechanism = None,
    params: MechanismParams,
    key_file: OptKeyFile = None,
    seed: Annotated[int | None, seed_flag(help="Seed (local engine only; experiments).")] = None,
    where: ShardEngine,
    batch_rows: OptBatchRows = 4096,
    column: OptColumn = None,
    id_column: Annotated[
        str | None, id_field_flag(help="Column holding the record ids (default: id).")
    ] = None,
    allow_reprotect: Annotated[
        bool, allow_reprotect_flag(help="Protect shards that are already protected.")
    ] = False,
    overwrite: OptOverwriteFolder = False,
    keep_column: Annotated[
        list[str] | None,
        keep_field_flag(
            help="Copy this other column into the output as it is, unprotected (repeatable; "
            "other columns are dropped).",
        ),
    ] = None,
    ledger_options: LedgerOptions,
) -> None:
    """Protect a folder or glob of Parquet shards, in this process or with Ray (--engine ray).

    With --key-file the output vectors are identical whatever the engine or partitioning.
    """
    from ..integrations.shards import protect_shards as run

    if mechanism is None or mechanism == "none":
        raise ValueError("--mechanism is required.")
    ledger = ledger_options.ledger
    randomness = _randomness(key_file, seed, ledger)
    mech = params.build(mechanism)
    summary = run(
        inputs,
        output,
        mech,
        **randomness,
        **where.kwargs(),
        batch_rows=batch_rows,
        column=column,
        id_column=id_column,
        **dataclasses.asdict(ledger_options),
        allow_reprotect=allow_reprotect,
        overwrite=overwrite,
        keep_columns=keep_column or (),
    )
    err_console.print(
        f"{_protected(summary)} from {summary['shards_in']} shard(s) into "
        f"{summary['files_out']} file(s) in {output} ({where.engine} engine, {summary['seconds']:.1f} s)",
        highlight=False,
    )
    if ledger is not None:
        from ..keys.ledger import redact_url

        err_console.print(
            f"ledger {redact_url(ledger)}: {summary['ledger_releases']} release(s), one per "
            "output shard",
            highlight=False,
        )
    err_console.print(f"guarantee: {summary['guarantee']}", highlight=False)
    if summary["dropped_columns"]:
        err_console.print(
            f"[yellow]note:[/yellow] dropped columns {', '.join(summary['dropped_columns'])} "
            "(not protected; keep one with --keep-field NAME)",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add ``index``, ``search``, ``protect-stream`` and ``protect-shards`` to ``app``."""
    app.command("index")(user_errors(with_option_groups(index)))
    app.command("search")(user_errors(with_option_groups(search)))
    app.command("protect-stream")(user_errors(with_option_groups(protect_stream)))
    app.command("protect-shards")(user_errors(with_option_groups(protect_shards)))


def _protected(summary: dict[str, Any]) -> str:
    """What a protect-stream or protect-shards run protected, in words."""
    return f"protected {summary['rows']} x {summary['dim_in']} -> {summary['dim_out']} embeddings"
