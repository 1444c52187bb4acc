"""Utility and privacy metrics, sweeps and reports."""

from __future__ import annotations

from .metrics import mean_cosine, neighbourhood_overlap, retrieval_ranks, self_retrieval

__all__ = ["mean_cosine", "neighbourhood_overlap", "retrieval_ranks", "self_retrieval"]
