"""The one release path: (inputs, ids, mechanism, key, ledger, destination) -> a published release.

Every front end -- ``privembed protect``, ``protect-stream``, ``index``, the shard and Ray
engines, the sklearn / sentence-transformers / LangChain wrappers and the server -- turns
embeddings into a release through :class:`Release`, so the rules below are written once:

* **Randomness.** Fresh OS entropy (default), a seed (experiments; each row has its own stream,
  so the result does not depend on batching or threads), or *keyed* noise: a record's noise is
  a function of (secret key, configuration, embedding model, input dimension, bit generator,
  typed record id, **content digest**) -- see :mod:`privembed.keys.keyed`. Re-releasing the same
  content returns the identical vector; changed content under the same id gets independent
  noise and is charged as a new release of that id. A seed is refused with a ledger: its noise
  repeats for an edited record at the same place, which the ledger would charge as independent.
* **Ids.** Keyed noise and the ledger need real record ids, typed canonically (``1`` and
  ``"1"`` differ; ``numpy.int64(1)`` and ``1`` do not). Line numbers are not ids: a release
  without ids is refused (or the ids are derived from the content on request: variants of one
  text -- case, whitespace, compatibility forms, and with a ledger one clean vector -- are one
  record, :mod:`~privembed.release.identity`). Duplicate ids in one release are refused, across
  batches too, in bounded memory.
* **Ledger before publish.** The records of a release are staged while the output is
  computed; :meth:`Release.commit` checks the budgets and records the release; only then is
  the output published (:func:`protect_file` renames the finished file inside the commit
  hook of :func:`privembed.data.io.atomic_output`, with SIGINT/SIGTERM held).
* **Sources and sinks.** A front end is a *source* (a file, a stream, shards, a server
  request), the release and a *sink* (a file, a store, a stream's output, an HTTP response),
  composed by :func:`publish` (:mod:`~privembed.release.flow`): it opens the ledger the one
  way and the sink commits each release before the rows it covers become visible. The commit's
  transaction also writes the budget change a command's flags asked for and a DP-PCA basis
  charge deferred to it; a refusal rolls all of it back, leaving the ledger as it was.
* **Checks.** Inputs are validated per block (NaN/inf/zero rows, dimension), outputs are
  checked finite before anything is published, the input dtype is kept.

The package, top to bottom: :mod:`~privembed.release.files` (files as a source and a sink:
``protect_file``), :mod:`~privembed.release.flow` (the source and sink protocols,
:class:`ReleaseRequest` and :func:`publish`), :mod:`~privembed.release.core`
(:class:`Release`, :func:`protect`),
:mod:`~privembed.release.identity` (content ids folded over variants),
:mod:`~privembed.release.ids` (typed, unique record ids), :mod:`~privembed.release.steps`
(pre-noise steps handed in, such as a concept eraser), :mod:`~privembed.release.setting` (what
a setting does to vectors: the note a summary carries) and :mod:`~privembed.release.policy` (the
rules: re-protection, key or seed, content ids, the charge, opening the ledger). The other
front ends (``integrations``: stream, collection, shards; the server) are sources and sinks
composed by :func:`publish`; none opens a ledger, stages a release or writes a rule itself
(``tools/architecture_counts.py`` counts the copies outside this package).
"""

from __future__ import annotations

from ..keys.ledger import DuplicateIds
from .core import Release, ReleaseSummary, protect
from .files import is_text_file, protect_file
from .flow import Batch, ReleaseRequest, Releases, Rows, Sink, Source, publish
from .ids import ReleasedIds
from .policy import (
    PROTECTION_KEYS,
    charge_text,
    check_randomness,
    content_ids,
    default_keyed_generator,
    open_ledger,
    refuse_protected,
    release_metadata,
)
from .setting import SettingNote, setting_note

__all__ = [
    "PROTECTION_KEYS",
    "Batch",
    "DuplicateIds",
    "Release",
    "ReleaseRequest",
    "ReleaseSummary",
    "ReleasedIds",
    "Releases",
    "Rows",
    "SettingNote",
    "Sink",
    "Source",
    "charge_text",
    "check_randomness",
    "content_ids",
    "default_keyed_generator",
    "is_text_file",
    "open_ledger",
    "protect",
    "protect_file",
    "publish",
    "refuse_protected",
    "release_metadata",
    "setting_note",
]
