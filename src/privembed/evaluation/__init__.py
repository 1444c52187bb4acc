"""Utility and privacy metrics, sweeps and reports: which mechanism and which epsilon for my data?

* :mod:`~privembed.evaluation.metrics` -- metric functions: mean cosine, self-retrieval
  recall@k with a tie policy, neighbourhood overlap, STS correlations, NDCG@10 / recall@k with
  relevance judgments, exact (FAISS) search.
* :class:`UtilityEvaluator` -- every utility metric of a release in one pass.
* :mod:`~privembed.evaluation.privacy` -- attacks as pluggable privacy metrics.
* :func:`grid`, :func:`run_sweep`, :class:`SweepResult` -- resumable sweeps to tidy tables.
* :func:`recommend` -- configurations meeting a utility floor *and* an attack ceiling
  (:mod:`~privembed.evaluation.recommend`).
* :func:`write_report` -- a self-contained HTML report with a recommendation.
* :mod:`~privembed.evaluation.loaders` -- evaluation data (Lee corpus, word similarity, a PII
  corpus, MTEB tasks); :mod:`~privembed.evaluation.baselines` -- text-level baselines.
"""

from __future__ import annotations

from .metrics import (
    exact_search,
    mean_cosine,
    ndcg_at_k,
    neighbourhood_overlap,
    pearson,
    qrels_recall_at_k,
    recall_at_k,
    retrieval_metrics,
    retrieval_ranks,
    self_retrieval,
    spearman,
    sts_correlation,
)
from .privacy import (
    WEAK_ATTACK,
    Averaging,
    CellRelease,
    Column,
    Linkage,
    StrengthCheck,
    TokenLeakage,
)
from .recommend import Floor, Recommendation, default_ceilings, parse_floors, recommend
from .report import write_report
from .sweep import SweepConfig, SweepResult, grid, run_sweep
from .utility import RetrievalTask, STSTask, UtilityEvaluator

__all__ = [
    "WEAK_ATTACK",
    "Averaging",
    "CellRelease",
    "Column",
    "Floor",
    "Linkage",
    "Recommendation",
    "RetrievalTask",
    "STSTask",
    "StrengthCheck",
    "SweepConfig",
    "SweepResult",
    "TokenLeakage",
    "UtilityEvaluator",
    "default_ceilings",
    "exact_search",
    "grid",
    "mean_cosine",
    "ndcg_at_k",
    "neighbourhood_overlap",
    "parse_floors",
    "pearson",
    "qrels_recall_at_k",
    "recall_at_k",
    "recommend",
    "retrieval_metrics",
    "retrieval_ranks",
    "run_sweep",
    "self_retrieval",
    "spearman",
    "sts_correlation",
    "write_report",
]
