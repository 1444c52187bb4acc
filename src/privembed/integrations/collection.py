"""A protected collection: protect on the way into a vector store, treat queries on the way out.

The public face of the collection modules, re-exporting every name they gave before they were
written apart:

* :mod:`~privembed.integrations.collection_core` -- :class:`ProtectedCollection`: protect and
  upsert (``add``, ``add_released``), query with the mechanism's treatment and exact re-rank;
* :mod:`~privembed.integrations.collection_sealed` -- sealed collections (payloads only, ranked
  on the client) and the arrays the key holder keeps sealed beside the store;
* :mod:`~privembed.integrations.collection_plan` -- k' from theory: the depth and batch size of
  a search and the clean-score profile behind ``recall=``;
* :mod:`~privembed.integrations.collection_search` -- :class:`Searcher` (a warm search session),
  :class:`SearchResult` and :func:`score_kind`;
* :mod:`~privembed.integrations.collection_index` -- :func:`index_file` (``privembed index``):
  a file protected batch by batch into a collection, and its profile sample.
"""

from __future__ import annotations

# `x as x`: names other modules and tests import from here (private ones too), kept importable
from .collection_core import ProtectedCollection
from .collection_core import _canon as _canon
from .collection_index import SEEN_IN_MEMORY as SEEN_IN_MEMORY
from .collection_index import _check_index_mode as _check_index_mode
from .collection_index import _index_input as _index_input
from .collection_index import _index_into as _index_into
from .collection_index import _IndexInput as _IndexInput
from .collection_index import _profile_query_vectors as _profile_query_vectors
from .collection_index import _ProfileSample as _ProfileSample
from .collection_index import _removed_on_failure as _removed_on_failure
from .collection_index import _rereader as _rereader
from .collection_index import _Reservoir as _Reservoir
from .collection_index import _text_batches as _text_batches
from .collection_index import index_file
from .collection_plan import PROFILE_BLOCK_BYTES as PROFILE_BLOCK_BYTES
from .collection_plan import _profile_block as _profile_block
from .collection_plan import _ProfileTarget as _ProfileTarget
from .collection_sealed import SEALED_GENERATION as SEALED_GENERATION
from .collection_sealed import SEALED_TREATMENT as SEALED_TREATMENT
from .collection_sealed import _sealed_params as _sealed_params
from .collection_sealed import sealed_protection as sealed_protection
from .collection_search import ESTIMATED as ESTIMATED
from .collection_search import EXACT as EXACT
from .collection_search import EXACT_UNPROTECTED as EXACT_UNPROTECTED
from .collection_search import PROTECTED as PROTECTED
from .collection_search import QUERY_AND_DOCS_PROTECTED as QUERY_AND_DOCS_PROTECTED
from .collection_search import QUERY_PROTECTED as QUERY_PROTECTED
from .collection_search import Searcher, SearchResult, score_kind
from .collection_search import _estimates as _estimates

__all__ = ["ProtectedCollection", "SearchResult", "Searcher", "index_file", "score_kind"]
