"""Options that several commands share, each declared once (issue 25.4).

A flag's spelling, its short alias and its default help live here; a command writes
``as_json: Annotated[bool, json_flag("Print the summary as JSON.")] = False`` and may word the
help for what the flag does there, but cannot spell the flag differently, give it another short
alias, or forget one. ``tests/test_cli_names.py`` checks that no command module declares one of
these flags itself and that every command spells and types them alike.

Where commands mean the same thing by a flag, the whole option -- type, flag and help -- is one
``Opt*`` alias below (``key_file: OptKeyFile = None``), as the mechanism options are in
``common.py``: the ledger's options, the key, the subspace basis, and the input options of the
commands that release a file (protect, index).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

#: flag -> its short alias: the shared flags that have one
SHORT: dict[str, str] = {"--quiet": "-q", "--output": "-o", "--mechanism": "-m", "--epsilon": "-e"}

#: flag -> its default help, which a command may word for what the flag does there
DEFAULT_HELP: dict[str, str] = {
    "--json": "Print JSON (stdout) instead of text.",
    "--overwrite": "Replace an existing output.",
    "--quiet": "Print nothing but errors.",
    "--output": "Write this file instead of stdout.",
    "--mechanism": "The privacy mechanism.",
    "--epsilon": "Privacy parameter epsilon.",
    "--seed": "Seed for reproducible runs.",
    "--k": "Output dimension (projection, subspace).",
    "--c": "Rank temperature.",
    "--id-field": "Field or column holding the record ids (default: id).",
    "--keep-field": "Copy this other field into the output as it is, unprotected.",
    "--allow-reprotect": "Protect an input that is already protected.",
    "--ids-from-content": "Derive record ids from the content (inputs without ids).",
    "--model": "Embedding model (default: offline all-MiniLM-L6-v2).",
    "--column": "Embedding column (Parquet).",
    "--batch-rows": "Rows per batch (bounds memory).",
    "--text-field": "Field or column holding the texts.",
    # the ledger a release is recorded and checked in (one convention: release.open_ledger)
    "--ledger": "Privacy ledger that records and checks releases: an SQLite file, or a "
    "postgresql:// URL shared by several processes (password from PGPASSWORD or ~/.pgpass).",
    "--budget-epsilon": "Set a first per-record epsilon budget, or confirm/lower the stored one.",
    "--budget-delta": "Set a first per-record delta budget, or confirm/lower the stored one.",
    "--subject-field": "Column (Parquet) or field (texts) naming each record's subject -- a "
    "patient, a user -- charged in the ledger with the per-subject budget.",
    "--subject-budget-epsilon": "Set a first per-subject epsilon budget, or confirm/lower it.",
    "--subject-budget-delta": "Set a first per-subject delta budget, or confirm/lower it.",
    "--ledger-timeout": "Seconds to wait for another process's ledger lock.",
    "--key-file": "Secret key (privembed keygen): keyed, repeat-safe noise.",
    "--delta": "delta (Gaussian, projection).",
    "--profile": "Concept profile (mahalanobis).",
    "--n": "Notes of the built-in PII corpus.",
    "--backend": "Model runtime (default: $PRIVEMBED_EMBED_BACKEND).",
    "--basis": "Subspace basis: public embeddings or a saved basis.",
    "--basis-epsilon": "Central epsilon of a DP-PCA basis.",
    "--basis-delta": "delta of a DP-PCA basis (central).",
    # the attacks' training knobs
    "--aux-fraction": "Share of the records the attacker owns.",
    "--epochs": "Training epochs.",
    "--lr": "Adam learning rate.",
    "--copies": "Protected copies per training text (adaptive).",
    "--train-texts": "Attacker's auxiliary texts.",
    "--train-embeddings": "Embeddings of --train-texts.",
    "--sensitive": "Sensitive tokens (.txt/.json/.jsonl); default: every token.",
    "--release": "A release of the same records (repeatable).",
    # what advise and evaluate judge a setting by
    "--ceiling": "Attack ceilings instead of the defaults.",
    "--reid-multiple": "Default linkage ceiling: reid@1 at most this multiple of chance.",
    "--n-queries": "Queries of the ranking metrics (0 = all).",
    "--min-cosine": "Utility floor on the mean cosine.",
    "--min-overlap": "Utility floor on knn_overlap@10.",
    "--mechanisms": "Comma-separated vector mechanisms.",
    "--attack-epochs": "Epochs of the token attack.",
    "--attack-lr": "Adam learning rate of the token attack.",
    # the old spelling of a command's INPUT argument (hidden from --help: texts_flag)
    "--texts": "Deprecated: give INPUT.",
}

#: flag -> (short alias or None, the factory's name): the contract the tests read
SHARED: dict[str, tuple[str | None, str]] = {}


def _shared(flag: str, **fixed: Any) -> Any:
    """The factory of the shared option ``flag``: its spelling and short alias fixed, its help
    the default one unless the command words its own."""
    short, default_help = SHORT.get(flag), DEFAULT_HELP[flag]

    def factory(help: str = default_help, **kw: Any) -> Any:
        names = (flag,) if short is None else (flag, short)
        return typer.Option(*names, help=help, **{**fixed, **kw})

    factory.__name__ = flag.lstrip("-").replace("-", "_") + "_flag"
    factory.__doc__ = f"``{flag}``{f' / ``{short}``' if short else ''}: {default_help}"
    SHARED[flag] = (short, factory.__name__)
    return factory


json_flag = _shared("--json")
overwrite_flag = _shared("--overwrite")
quiet_flag = _shared("--quiet")
output_flag = _shared("--output")
mechanism_flag = _shared("--mechanism")
epsilon_flag = _shared("--epsilon")
seed_flag = _shared("--seed")
k_flag = _shared("--k")
c_flag = _shared("--c")
id_field_flag = _shared("--id-field")
keep_field_flag = _shared("--keep-field")
allow_reprotect_flag = _shared("--allow-reprotect")
ids_from_content_flag = _shared("--ids-from-content")
model_flag = _shared("--model")
column_flag = _shared("--column")
batch_rows_flag = _shared("--batch-rows")
text_field_flag = _shared("--text-field")
ledger_flag = _shared("--ledger")
budget_epsilon_flag = _shared("--budget-epsilon")
budget_delta_flag = _shared("--budget-delta")
subject_field_flag = _shared("--subject-field")
subject_budget_epsilon_flag = _shared("--subject-budget-epsilon")
subject_budget_delta_flag = _shared("--subject-budget-delta")
ledger_timeout_flag = _shared("--ledger-timeout")
key_file_flag = _shared("--key-file")
delta_flag = _shared("--delta")
profile_flag = _shared("--profile")
n_flag = _shared("--n")
backend_flag = _shared("--backend")
basis_flag = _shared("--basis")
basis_epsilon_flag = _shared("--basis-epsilon")
basis_delta_flag = _shared("--basis-delta")
aux_fraction_flag = _shared("--aux-fraction")
epochs_flag = _shared("--epochs")
lr_flag = _shared("--lr")
copies_flag = _shared("--copies")
train_texts_flag = _shared("--train-texts")
train_embeddings_flag = _shared("--train-embeddings")
sensitive_flag = _shared("--sensitive")
release_flag = _shared("--release")
ceiling_flag = _shared("--ceiling")
reid_multiple_flag = _shared("--reid-multiple")
n_queries_flag = _shared("--n-queries")
min_cosine_flag = _shared("--min-cosine")
min_overlap_flag = _shared("--min-overlap")
mechanisms_flag = _shared("--mechanisms")
attack_epochs_flag = _shared("--attack-epochs")
attack_lr_flag = _shared("--attack-lr")
#: the old spelling of a command's INPUT argument: parsed, hidden from --help (advise, evaluate
#: and search have a live ``--texts`` of their own: the texts behind the vectors)
texts_flag = _shared("--texts", hidden=True)

#: (command, flag) where the same spelling names another thing, kept apart on purpose
OTHER_MEANING: dict[tuple[str, str], str] = {
    ("search", "--k"): "hits per query (-k), not an output dimension",
    ("advise", "--texts"): "the texts behind the vectors, for the token attack",
    ("evaluate", "--texts"): "the texts behind the vectors, for the token attack",
    ("search", "--texts"): "the texts behind the hits, kept locally",
    ("text analyze", "--mechanisms"): "word-level mechanisms (nearest, rank, exponential)",
}

# ---- whole options, for the commands that mean the same thing by them ------------------------
#: ``--key-file`` (protect, index, search, protect-stream, protect-shards)
OptKeyFile = Annotated[Path | None, key_file_flag()]
#: ``--seed`` of a release (protect, index, protect-stream)
OptSeed = Annotated[
    int | None, seed_flag(help="Seed for reproducible experiments (omit in production).")
]
#: ``--ledger`` a release is recorded and checked in (protect, index, protect-stream/-shards)
OptLedger = Annotated[str | None, ledger_flag()]
#: ``--budget-epsilon``
OptBudgetEpsilon = Annotated[float | None, budget_epsilon_flag()]
#: ``--budget-delta``
OptBudgetDelta = Annotated[float | None, budget_delta_flag()]
#: ``--subject-field``
OptSubjectField = Annotated[str | None, subject_field_flag()]
#: ``--subject-budget-epsilon``
OptSubjectBudgetEpsilon = Annotated[float | None, subject_budget_epsilon_flag()]
#: ``--subject-budget-delta``
OptSubjectBudgetDelta = Annotated[float | None, subject_budget_delta_flag()]
#: ``--ledger-timeout``
OptLedgerTimeout = Annotated[float, ledger_timeout_flag()]
#: ``--basis`` of ``-m subspace`` (protect, index)
OptBasis = Annotated[
    str | None,
    basis_flag(
        help="Subspace basis (-m subspace): public data (embeddings or texts; exact PCA), a saved "
        "basis, or 'dp-pca' (DP-PCA of INPUT, charged to every record in --ledger).",
    ),
]
#: ``--basis-epsilon``
OptBasisEpsilon = Annotated[
    float | None, basis_epsilon_flag(help="epsilon of a DP-PCA basis (central).")
]
#: ``--basis-delta``
OptBasisDelta = Annotated[float | None, basis_delta_flag()]
#: ``--column`` of an embeddings input (Parquet)
OptColumn = Annotated[str | None, column_flag()]
#: ``--id-field``
OptIdField = Annotated[str | None, id_field_flag()]
#: ``--text-field`` of a command that takes embeddings or texts
OptTextField = Annotated[
    str, text_field_flag(help="Field or column holding the texts (text input).")
]
#: ``--batch-rows``
OptBatchRows = Annotated[int, batch_rows_flag()]
#: ``--min-cosine`` of the commands that judge a setting (advise, evaluate)
OptMinCosine = Annotated[float | None, min_cosine_flag()]
#: ``--runs`` of the commands that judge a setting (advise, evaluate)
OptRuns = Annotated[
    int, typer.Option(help="Independent releases of every setting; their results are averaged.")
]
#: ``--allow-reprotect``
OptAllowReprotect = Annotated[
    bool, allow_reprotect_flag(help="Protect a file that is already protected.")
]
#: ``--quiet``
OptQuiet = Annotated[bool, quiet_flag()]
#: ``--json`` of a command that prints a summary
OptJsonSummary = Annotated[bool, json_flag(help="Print a JSON summary (stdout) instead of text.")]
#: ``--overwrite`` of a command that writes one file
OptOverwriteFile = Annotated[bool, overwrite_flag(help="Replace an existing output file.")]
#: ``--json`` of a command that prints one result (a record, a key id, a verdict, a spend)
OptJson = Annotated[bool, json_flag(help="Print the result as JSON (stdout) instead of text.")]
#: ``--json`` of a command whose text shows part of what it holds (info, ledger show)
OptJsonFull = Annotated[
    bool, json_flag(help="Print the full result as JSON (stdout) instead of the text summary.")
]
#: ``--overwrite`` of a command that writes into an output folder
OptOverwriteFolder = Annotated[
    bool, overwrite_flag(help="Replace what an earlier run wrote in the output folder.")
]
#: ``--seed`` of a run that draws everything it needs from one seed (demo, advise, evaluate)
OptRunSeed = Annotated[
    int, seed_flag(help="Seed of every random draw of the run (data, noise, attacks).")
]
#: ``--model`` that embeds texts given to the command (embed, protect, demo, advise, evaluate)
OptModel = Annotated[
    str | None,
    model_flag(
        help="Embedding model for the texts the command embeds: a name or a folder "
        "(default: offline all-MiniLM-L6-v2)."
    ),
]
# the training knobs of a model the command fits (attack inversion's decoder, concept learn)
#: ``--epochs``
OptEpochs = Annotated[int, epochs_flag(help="Training epochs.")]
#: ``--lr``
OptLr = Annotated[float, lr_flag(help="Adam learning rate.")]
#: ``--batch-size`` of a training (examples per optimiser step)
OptTrainBatchSize = Annotated[int, typer.Option(help="Training minibatch: examples per step.")]
#: ``--copies`` of an adaptive attacker (attack token, attack attribute)
OptCopies = Annotated[
    int, copies_flag(help="Protected copies the attacker makes of each text it trains on.")
]
