"""privembed: protect text embeddings before they leave a trust boundary, and measure what the
protection costs (utility) and buys (what attacks still recover).

The public API is re-exported here; heavy parts (embedding models, torch, FAISS, plotting) live
behind optional extras and are imported lazily.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .core._validation import DataError
from .core.accounting import ApproxDP, Guarantee, MetricDP, NoGuarantee, PureDP, guarantee_from_dict
from .core.rng import as_generator, spawn
from .mechanisms import (
    EmpiricalGaussianMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    Mechanism,
    PurkayasthaMechanism,
    get_mechanism,
)

try:
    __version__ = version("privembed")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ApproxDP",
    "DataError",
    "EmpiricalGaussianMechanism",
    "GaussianMechanism",
    "Guarantee",
    "LaplaceMechanism",
    "MahalanobisMechanism",
    "Mechanism",
    "MetricDP",
    "NoGuarantee",
    "PureDP",
    "PurkayasthaMechanism",
    "__version__",
    "as_generator",
    "get_mechanism",
    "guarantee_from_dict",
    "spawn",
]
