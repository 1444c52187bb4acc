"""Option groups of the commands that release embeddings (protect, index, protect-stream,
protect-shards): options that always travel together, declared once (issue 41) -- the ledger,
the randomness, what the release reads and reports, index's payloads, protect-stream's formats
and protect-shards' engine.

Each group is a :class:`~privembed._cli.common.OptionGroup`: a command parameter annotated
with it stands for all of its options, in place in ``--help``, and the command receives one
instance. What the commands do with a group -- open the ledger, name the options given, pass
the budgets on -- is written here once too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer

from .common import BitGeneratorName, KeyedGenerator, OptionGroup, err_console
from .options import (
    OptBudgetDelta,
    OptBudgetEpsilon,
    OptColumn,
    OptIdField,
    OptJsonSummary,
    OptKeyFile,
    OptLedger,
    OptQuiet,
    OptSubjectBudgetDelta,
    OptSubjectBudgetEpsilon,
    OptSubjectField,
    OptTextField,
    ids_from_content_flag,
    keep_field_flag,
)

__all__ = [
    "InputFields",
    "LedgerOptions",
    "PayloadOptions",
    "RandomnessOptions",
    "Report",
    "ShardEngine",
    "StreamFormats",
    "SubjectOptions",
]

KeepFields = Annotated[
    list[str] | None,
    keep_field_flag(
        help="Copy this other field or column into the output as it is, unprotected "
        "(repeatable; others are dropped).",
    ),
]
IdsFromContent = Annotated[
    bool,
    ids_from_content_flag(
        help="Derive record ids from the content (texts or vectors without ids).",
    ),
]
KeyedNoiseGenerator = Annotated[
    KeyedGenerator | None,
    typer.Option(help="Keyed noise generator (default: aes under a CSPRNG policy)."),
]
RandomnessPolicy = Annotated[
    BitGeneratorName | None,
    typer.Option(help="Randomness policy (aes, chacha: CSPRNG; need randomgen)."),
]


@dataclass
class InputFields(OptionGroup):
    """Where protect reads its input: the embedding column, the ids, the texts, the fields
    copied through, or ids derived from the content."""

    column: OptColumn = None
    id_column: OptIdField = None
    text_field: OptTextField = "text"
    keep_column: KeepFields = None
    ids_from_content: IdsFromContent = False

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of :func:`privembed.release.protect_file`."""
        return {"column": self.column, "id_column": self.id_column,
                "text_field": self.text_field, "ids_from_content": self.ids_from_content,
                "keep_columns": self.keep_column or ()}  # fmt: skip


@dataclass
class RandomnessOptions(OptionGroup):
    """The randomness of a release: a secret key for keyed (repeat-safe) noise, its generator,
    and the bit generator of everything else."""

    key_file: OptKeyFile = None
    generator: KeyedNoiseGenerator = None
    bit_generator: RandomnessPolicy = None

    def check(self, seed: int | None, ledger: str | None) -> None:
        """A key or a seed, never both, and no seed with a ledger, before anything is read."""
        from ..release import check_randomness

        check_randomness(
            self.key_file, seed, ledger=ledger, key_name="--key-file", rng_name="--seed"
        )

    def policy(self) -> Any:
        """The context in which the release draws its randomness (``--bit-generator``)."""
        from ..core.rng import bit_generator_name, use_bit_generator

        return use_bit_generator(self.bit_generator or bit_generator_name())


@dataclass
class LedgerOptions(OptionGroup):
    """The ledger a release is recorded and checked in, with the per-record budget to set,
    confirm or lower there (``--ledger``, ``--budget-epsilon``, ``--budget-delta``)."""

    ledger: OptLedger = None
    budget_epsilon: OptBudgetEpsilon = None
    budget_delta: OptBudgetDelta = None

    def budgets(self) -> dict[str, Any]:
        """The per-record budget as keyword arguments of a release."""
        return {"budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta}

    def open(self) -> Any:
        """:func:`privembed.release.open_ledger` with the budget, saying on stderr when another
        process holds the ledger's lock."""
        from ..release import open_ledger

        return open_ledger(
            self.ledger,
            **self.budgets(),
            on_wait=lambda p: err_console.print(
                f"waiting for the ledger {p} (locked by another process)...", highlight=False
            ),
        )


@dataclass
class Report(OptionGroup):
    """How a release reports what it did: a summary on stderr, nothing but errors
    (``--quiet``), or a JSON summary on stdout (``--json``)."""

    quiet: OptQuiet = False
    as_json: OptJsonSummary = False


@dataclass
class SubjectOptions(OptionGroup):
    """The subjects a release charges (a patient, a user: ``--subject-field``) and their
    per-subject budget (``--subject-budget-epsilon``, ``--subject-budget-delta``)."""

    subject_column: OptSubjectField = None
    subject_budget_epsilon: OptSubjectBudgetEpsilon = None
    subject_budget_delta: OptSubjectBudgetDelta = None

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of :func:`privembed.release.protect_file`."""
        return dataclasses.asdict(self)


# ---- index's payloads, protect-stream's formats, protect-shards' engine -------------------
@dataclass
class PayloadOptions(OptionGroup):
    """The sealed payloads that search re-ranks by: whether index stores them, how they hold
    the exact vector, how they are padded, and whether they also hold the text."""

    payloads: Annotated[
        bool,
        typer.Option(
            "--payloads",
            help="Store each record's exact vector sealed with the key (AES-256-GCM) for exact "
            "re-ranking inside the trust boundary (search --rerank/--recall).",
        ),
    ] = False
    payload_dtype: Annotated[
        Literal["float32", "float16"], typer.Option(help="How payloads store exact vectors.")
    ] = "float32"
    pad_to: Annotated[
        str,
        typer.Option(
            "--pad-to",
            help="Pad payload plaintexts so their length hides the text's: 'padme' (at most "
            "11.7% larger, O(log log L) bits of the length shown), N (a multiple of N bytes) "
            "or 0 (no padding: the length of each text shows).",
        ),
    ] = "padme"
    store_text: Annotated[
        bool,
        typer.Option("--store-text", help="Also seal each text in its payload (texts as input)."),
    ] = False

    def sealing(self) -> dict[str, Any]:
        """How each payload is sealed, as keyword arguments of
        :func:`~privembed.integrations.collection.index_file`: its vector's dtype, its padding
        ('padme' or a multiple of bytes) and whether it holds the text."""
        pad = self.pad_to if self.pad_to == "padme" else _pad_bytes(self.pad_to)
        return {"payload_dtype": self.payload_dtype, "pad_to": pad, "store_text": self.store_text}


@dataclass
class StreamFormats(OptionGroup):
    """What protect-stream reads and writes: JSONL lines or one .npy (by default the output in
    the input's format)."""

    in_format: Annotated[Literal["jsonl", "npy"], typer.Option(help="Input format.")] = "jsonl"
    out_format: Annotated[
        Literal["jsonl", "npy"] | None,
        typer.Option(help="Output format (default: the input format)."),
    ] = None


@dataclass
class ShardEngine(OptionGroup):
    """Where protect-shards and index-shards work: on this machine (one process; index-shards'
    writer processes), or with Ray Data on a cluster or on a local instance."""

    engine: Annotated[
        Literal["local", "ray"], typer.Option(help="This machine, or Ray Data (--address).")
    ] = "local"
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local one).")
    ] = None
    num_cpus: Annotated[
        int | None, typer.Option(help="CPUs for a local Ray instance (default: all).")
    ] = None

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of
        :func:`~privembed.integrations.shards.protect_shards`, Ray's own log kept to warnings."""
        if self.engine == "ray":
            import logging

            logging.getLogger("ray").setLevel(logging.WARNING)
        return {"engine": self.engine, "address": self.address, "num_cpus": self.num_cpus}


def _pad_bytes(text: str) -> int:
    """``--pad-to N``: a non-negative number of bytes."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"--pad-to must be 'padme' or a number of bytes >= 0, got {text!r}.")
    return n
