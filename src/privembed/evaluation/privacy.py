"""Privacy metrics for sweeps: attacks run on every release, as pluggable callables.

A privacy metric is any callable that takes a :class:`CellRelease` (the mechanism, the originals,
the protected vectors and a random generator reserved for the attack) and returns a mapping of
column name -> float. A sweep stores whatever columns its metrics return, and the report shows
them; nothing else is assumed. Columns are described (and told apart from utility columns) by
an optional ``columns`` attribute of ``{name: Column}``; an undescribed column counts as a
privacy risk where higher means more leakage.

Built-in metrics wrap the attacks of :mod:`privembed.attacks` (imported when first called):

* :class:`Linkage` -- re-identification of each protected vector among the originals
  (:class:`~privembed.attacks.LinkageAttack`): ``reid@1``, ``reid@10``, ``reid_mrr``.
* :class:`TokenLeakage` -- the MLC token-inference attack ([T26] App. I.3,
  :class:`~privembed.attacks.MLCAttack`), adaptive by default (trained on auxiliary embeddings
  protected by the very mechanism under test): ``leakage``, ``confidence``, ``auc_sensitive``,
  and ``leakage_chance`` (a blind attacker's leakage, for reference).
* :class:`Averaging` -- cosine to the original of the mean of N fresh releases
  (:func:`~privembed.attacks.averaging_attack`): ``avg{N}_cosine``.

Attacks prove their strength. A metric may also have a ``check(release)`` method, which the
sweep calls once on the *unprotected* embeddings: it returns the metric's columns and a
:class:`StrengthCheck` -- the attack's headline number against its blind baseline (a random
guess for linkage, the token-frequency attacker for token inference, the corpus centroid for
averaging) with a 95% interval of the difference. An attack whose interval does not exclude
chance is labelled :data:`WEAK_ATTACK` ("attack too weak: no evidence about protection")
wherever its numbers appear, and its numbers are not used as leakage (plots, ceilings,
recommendations). A metric without ``check`` is labelled "strength not checked".

Examples
--------
>>> def norm_gap(release):  # a custom metric: any callable returning a dict of floats
...     return {"norm_gap": round(float(abs(np.linalg.norm(release.Y, axis=1) - 1).max()), 9)}
>>> from privembed.mechanisms import LaplaceMechanism
>>> m = LaplaceMechanism(epsilon=10.0); X = np.eye(4)
>>> norm_gap(CellRelease(m, X, m.privatize(X, rng=0), rng=np.random.default_rng(1)))
{'norm_gap': 0.0}
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int
from ..core.accounting import NoGuarantee
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism

__all__ = [
    "NOT_CHECKED",
    "WEAK_ATTACK",
    "Averaging",
    "CellRelease",
    "Column",
    "Linkage",
    "PrivacyMetric",
    "StrengthCheck",
    "TokenLeakage",
    "Unprotected",
    "describe_columns",
    "run_on_plain",
]

#: the label of every number of an attack that does not beat chance on unprotected embeddings
WEAK_ATTACK = "attack too weak: no evidence about protection"
#: the label of a custom metric that declares no blind baseline (no ``check`` method)
NOT_CHECKED = "strength not checked (no blind baseline declared)"


@dataclass(frozen=True)
class Column:
    """What a metric column means and which way is good.

    Attributes
    ----------
    description : str
    kind : {"utility", "privacy", "reference"}
        ``"privacy"`` columns measure what an attacker gets (the report's risk axis);
        ``"reference"`` columns are context (e.g. chance levels) and are never optimised.
    higher_is_better : bool
        For utility columns True; for privacy columns False (higher = more leakage).
    """

    description: str
    kind: str = "privacy"
    higher_is_better: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StrengthCheck:
    """Does an attack beat its blind baseline on *unprotected* embeddings?

    Attributes
    ----------
    attack : str
        The metric's name (e.g. ``"linkage"``).
    statistic : str
        The column judged (e.g. ``"reid@1"``, ``"leakage"``).
    value : float
        Its value on the unprotected embeddings.
    chance : float
        The blind baseline's value (what the number means nothing beyond).
    excess_low, excess_high : float
        95% interval of ``value - chance``.
    method : str
        How the interval was made.
    columns : tuple of str
        Every column of the attack (all carry its verdict).

    Examples
    --------
    >>> c = StrengthCheck("token_inference", "leakage", 0.071, 0.264, -0.21, -0.17, "bootstrap")
    >>> c.passed, c.status
    (False, 'attack too weak: no evidence about protection')
    """

    attack: str
    statistic: str
    value: float
    chance: float
    excess_low: float
    excess_high: float
    method: str = ""
    columns: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when the interval's lower end is above 0 (the attack beats chance)."""
        return bool(self.excess_low > 0)

    @property
    def status(self) -> str:
        """``"ok"`` or :data:`WEAK_ATTACK`."""
        return "ok" if self.passed else WEAK_ATTACK

    def text(self) -> str:
        """One line: the numbers and the verdict."""
        verdict = "beats chance" if self.passed else WEAK_ATTACK
        return (
            f"{self.attack}: {self.statistic} {self.value:.3f} on unprotected embeddings vs "
            f"{self.chance:.3f} for a blind attacker (95% interval of the difference "
            f"[{self.excess_low:+.3f}, {self.excess_high:+.3f}]): {verdict}"
        )

    def with_columns(self, columns: Sequence[str]) -> StrengthCheck:
        return StrengthCheck(
            self.attack,
            self.statistic,
            self.value,
            self.chance,
            self.excess_low,
            self.excess_high,
            self.method,
            tuple(columns),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "statistic": self.statistic,
            "value": self.value,
            "chance": self.chance,
            "excess_low": self.excess_low,
            "excess_high": self.excess_high,
            "method": self.method,
            "columns": list(self.columns),
            "passed": self.passed,
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StrengthCheck:
        def num(v: Any) -> float:
            return float("nan") if v is None else float(v)

        return cls(
            str(d["attack"]),
            str(d["statistic"]),
            num(d.get("value")),
            num(d.get("chance")),
            num(d.get("excess_low")),
            num(d.get("excess_high")),
            str(d.get("method", "")),
            tuple(d.get("columns", ())),
        )


@dataclass
class CellRelease:
    """One sweep cell's protected vectors, handed to every privacy metric of the cell (what the
    attacks measure, not a publication: releases are :class:`privembed.release.Release`).

    Attributes
    ----------
    mechanism : Mechanism or Unprotected
    X : ndarray, shape (n, d)
        The originals.
    Y : ndarray, shape (n, d) or (n, k)
        The release, row i from X[i].
    rng : numpy.random.Generator
        Randomness reserved for the attack (a stream of its own per sweep cell).
    info : dict
        The sweep cell (configuration label, run index, ...).
    """

    mechanism: Mechanism | Unprotected
    X: NDArray[Any]
    Y: NDArray[Any]
    rng: np.random.Generator
    info: dict[str, Any] = field(default_factory=dict)

    def reference(self) -> NDArray[Any]:
        """The originals in the released space (``P x`` for a projection mechanism)."""
        project = getattr(self.mechanism, "project", None)
        if self.Y.shape[1] != self.X.shape[1] and callable(project):
            return np.asarray(project(self.X))
        return self.X


class Unprotected:
    """The identity "mechanism": releases the embeddings as they are.

    Used by :func:`~privembed.evaluation.run_sweep` to run every privacy metric on the plain
    embeddings once, so that each attack's numbers have their unprotected reference (the same
    attacker, trained and scored on unprotected vectors). It is not a protection mechanism and
    is not in the mechanism registry.
    """

    name = "none"
    fingerprint = "none"

    @property
    def guarantee(self) -> NoGuarantee:
        return NoGuarantee("unprotected embeddings")

    def privatize(self, X: Any, rng: Any = None, **_: Any) -> NDArray[Any]:
        A = np.asarray(X)
        return np.array(A, dtype=A.dtype if A.dtype.kind == "f" else np.float64, copy=True)


@runtime_checkable
class PrivacyMetric(Protocol):
    """A callable ``metric(release) -> {column: value}``; ``columns`` is optional."""

    def __call__(self, release: CellRelease) -> Mapping[str, float]: ...


def describe_columns(metric: Callable[..., Any]) -> dict[str, Column]:
    """The ``columns`` a metric declares (``{}`` if it declares none)."""
    cols = getattr(metric, "columns", None)
    if not cols:
        return {}
    return {str(k): v if isinstance(v, Column) else Column(str(v)) for k, v in dict(cols).items()}


def metric_name(metric: Callable[..., Any]) -> str:
    """A stable name for a metric callable (its ``name`` attribute, class or function name)."""
    name = getattr(metric, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(metric, "__name__", type(metric).__name__)


def metric_signature(metric: Callable[..., Any]) -> Any:
    """What identifies a metric's setup in a resumable results file (``signature()`` if given)."""
    sig = getattr(metric, "signature", None)
    if callable(sig):
        return sig()
    return metric_name(metric)


class Linkage:
    """Re-identification: link each protected vector to its original by cosine ([K26]).

    Parameters
    ----------
    ks : sequence of int, default (1, 10)
    max_records : int or None, default 2000
        Attack at most this many records (a fixed sample, seed 0): the attacker's candidate
        pool is the originals of the sampled records, so the cost stays O(max_records^2).
        ``None`` attacks every record against all originals.

    Notes
    -----
    ``reid@1`` over the full pool equals ``top1_originals`` of
    :class:`~privembed.evaluation.UtilityEvaluator`: what makes protected vectors findable
    also makes them linkable.
    """

    name = "linkage"

    def __init__(self, *, ks: Sequence[int] = (1, 10), max_records: int | None = 2000) -> None:
        if isinstance(ks, int) or not ks:
            raise ValueError(f"ks must be a non-empty sequence of ints, got ks={ks!r}.")
        self.ks = tuple(sorted({check_int("k", k, ge=1) for k in ks}))
        self.max_records = (
            None if max_records is None else check_int("max_records", max_records, ge=2)
        )
        self.columns = {
            **{
                f"reid@{k}": Column(f"linkage attack: share re-identified in the top {k}")
                for k in self.ks
            },
            "reid_mrr": Column("linkage attack: mean reciprocal rank of the true original"),
            **{
                f"reid_chance@{k}": Column(
                    f"linkage: a random guess's top-{k} rate (k / candidates)", kind="reference"
                )
                for k in self.ks
            },
        }

    def signature(self) -> Any:
        return {"linkage": list(self.ks), "max_records": self.max_records, "version": 2}

    def _run(self, release: CellRelease) -> tuple[dict[str, float], Any]:
        from ..attacks import LinkageAttack

        C = release.reference()
        Y = release.Y
        n = Y.shape[0]
        if self.max_records is not None and n > self.max_records:
            idx = np.sort(as_generator(0).choice(n, self.max_records, replace=False))
            Y, C = Y[idx], C[idx]
        rep = LinkageAttack(ks=self.ks).score(Y, C)
        out = {f"reid@{k}": float(v) for k, v in rep.top_k.items()}
        out["reid_mrr"] = float(rep.mrr)
        out.update({f"reid_chance@{k}": float(v) for k, v in rep.chance.items()})
        return out, rep

    def __call__(self, release: CellRelease) -> dict[str, float]:
        return self._run(release)[0]

    def check(self, release: CellRelease) -> tuple[dict[str, float], StrengthCheck]:
        """Run on unprotected embeddings: the columns, and top-1 linkage against a random
        guess (1 / candidates) with the Wilson interval of the rate."""
        out, rep = self._run(release)
        k = self.ks[0]
        lo, hi = rep.interval[k]
        chance = rep.chance[k]
        return out, StrengthCheck(
            self.name,
            f"reid@{k}",
            rep.top_k[k],
            chance,
            lo - chance,
            hi - chance,
            f"Wilson interval over {rep.n_protected} records",
            tuple(out),
        )


class TokenLeakage:
    """Token inference (MLC) against each release ([T26] App. I.3, eqs. 13-14).

    The sweep's embeddings ``X`` are the *target* texts; the attacker owns a disjoint auxiliary
    corpus (texts and their plain embeddings). Adaptive (default): for every release the
    attacker protects its auxiliary embeddings with the same mechanism and parameters and trains
    on them (:meth:`~privembed.attacks.MLCAttack.fit_adaptive`); otherwise it trains once on the
    plain auxiliary embeddings.

    Parameters
    ----------
    texts : sequence of str
        Target texts, aligned with the rows of the sweep's ``X``.
    aux_texts : sequence of str
    aux_embeddings : array_like, shape (m, d)
    sensitive : sequence of sets of str, optional
        Sensitive tokens of each target text (default: all its tokens).
    adaptive : bool, default True
    attack : dict, optional
        Keyword arguments of :class:`~privembed.attacks.MLCAttack` (default
        :data:`~privembed.attacks.token_inference.AUDIT_SETTINGS`, the settings measured to beat
        the blind attacker on the demo and PII corpora; [T26]'s own settings do not).
    n_copies : int, default 1
        Protected copies of the auxiliary set for the adaptive attacker.
    rows : sequence of int, optional
        Rows of the sweep's ``X`` that ``texts`` belong to (default: all rows, in order) --
        e.g. when the attacker's auxiliary records are part of the evaluated file.
    """

    name = "token_inference"

    def __init__(
        self,
        *,
        texts: Sequence[str],
        aux_texts: Sequence[str],
        aux_embeddings: Any,
        sensitive: Sequence[Any] | None = None,
        adaptive: bool = True,
        attack: Mapping[str, Any] | None = None,
        n_copies: int = 1,
        rows: Sequence[int] | None = None,
    ) -> None:
        self.texts = list(texts)
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        if self.rows is not None and self.rows.size != len(self.texts):
            raise DataError(f"rows has {self.rows.size} entries but texts has {len(self.texts)}.")
        self.aux_texts = list(aux_texts)
        self.aux = np.asarray(aux_embeddings)
        if self.aux.ndim != 2 or self.aux.shape[0] != len(self.aux_texts):
            raise DataError(
                f"aux_embeddings must have one row per auxiliary text ({len(self.aux_texts)}), "
                f"got shape {self.aux.shape}."
            )
        self.sensitive = None if sensitive is None else [set(s) for s in sensitive]
        if self.sensitive is not None and len(self.sensitive) != len(self.texts):
            raise DataError(
                f"sensitive has {len(self.sensitive)} entries but texts has {len(self.texts)}."
            )
        self.adaptive = bool(adaptive)
        if attack is None:
            from ..attacks.token_inference import AUDIT_SETTINGS

            attack = {k: list(v) if isinstance(v, tuple) else v for k, v in AUDIT_SETTINGS.items()}
        self.attack_kwargs = dict(attack)
        self.n_copies = check_int("n_copies", n_copies, ge=1)
        self._plain_attack: Any = None
        self.columns = {
            "leakage": Column("MLC token inference: share of sensitive tokens recovered"),
            "confidence": Column("MLC token inference: mean probability on sensitive tokens"),
            "auc_sensitive": Column("MLC token inference: macro AUC over sensitive tokens"),
            "leakage_chance": Column(
                "leakage of a blind attacker (token frequencies only)", kind="reference"
            ),
            "leakage_excess_low": Column(
                "lower end of the 95% interval of leakage - leakage_chance (paired bootstrap "
                "over texts); <= 0: no more leakage than a blind attacker's",
                kind="reference",
            ),
        }

    def signature(self) -> Any:
        return {
            "token_inference": self.attack_kwargs,
            "adaptive": self.adaptive,
            "n_copies": self.n_copies,
            "aux": len(self.aux_texts),
            "targets": len(self.texts),
            "texts_sha256": hashlib.sha256(
                "\x1e".join([*self.texts, "\x1d", *self.aux_texts]).encode()
            ).hexdigest(),
            "rows": None if self.rows is None else hashlib.sha256(self.rows.tobytes()).hexdigest(),
        }

    def _attack(self) -> Any:
        from ..attacks import MLCAttack

        return MLCAttack(**self.attack_kwargs)

    def _run(self, release: CellRelease) -> tuple[dict[str, float], Any]:
        Y = release.Y if self.rows is None else release.Y[self.rows]
        if Y.shape[0] != len(self.texts):
            raise DataError(
                f"the release has {Y.shape[0]} rows but {len(self.texts)} target texts were given."
            )
        if self.adaptive:
            atk = self._attack().fit_adaptive(
                self.aux_texts, self.aux, release.mechanism, n_copies=self.n_copies, rng=release.rng
            )
        else:
            if self._plain_attack is None:
                self._plain_attack = self._attack().fit(self.aux_texts, self.aux, rng=0)
            atk = self._plain_attack
        rep = atk.score(self.texts, Y, sensitive=self.sensitive)
        out = {
            "leakage": float(rep.leakage),
            "confidence": float(rep.confidence),
            "auc_sensitive": float(rep.auc_sensitive),
            "leakage_chance": float(rep.leakage_chance),
            "leakage_excess_low": float(rep.leakage_excess_low),
        }
        return out, rep

    def __call__(self, release: CellRelease) -> dict[str, float]:
        return self._run(release)[0]

    def check(self, release: CellRelease) -> tuple[dict[str, float], StrengthCheck]:
        """Run on unprotected embeddings: the columns, and leakage against the blind
        (token-frequency) attacker with a paired bootstrap interval over the target texts."""
        out, rep = self._run(release)
        return out, StrengthCheck(
            self.name,
            "leakage",
            rep.leakage,
            rep.leakage_chance,
            rep.leakage_excess_low,
            rep.leakage_excess_high,
            f"paired bootstrap over {rep.n_texts} target texts",
            tuple(out),
        )


class Averaging:
    """Averaging attack: cosine to the original of the mean of ``n_releases`` fresh releases.

    Parameters
    ----------
    n_releases : int, default 10
    max_records : int or None, default 500
        Records attacked (a fixed sample, seed 0); each costs ``n_releases`` extra releases.
    """

    name = "averaging"

    def __init__(self, *, n_releases: int = 10, max_records: int | None = 500) -> None:
        self.n_releases = check_int("n_releases", n_releases, ge=2)
        self.max_records = (
            None if max_records is None else check_int("max_records", max_records, ge=1)
        )
        self.columns = {
            f"avg{self.n_releases}_cosine": Column(
                f"averaging attack: mean cosine to the original of the mean of "
                f"{self.n_releases} fresh releases"
            )
        }

    def signature(self) -> Any:
        return {"averaging": self.n_releases, "max_records": self.max_records}

    def _run(self, release: CellRelease) -> tuple[dict[str, float], Any, Any]:
        from ..attacks import averaging_attack, release_stack

        X = release.X
        if self.max_records is not None and X.shape[0] > self.max_records:
            X = X[np.sort(as_generator(0).choice(X.shape[0], self.max_records, replace=False))]
        R = release_stack(release.mechanism, X, self.n_releases, rng=release.rng)
        ref = CellRelease(release.mechanism, X, R[0], release.rng).reference()
        rep = averaging_attack(R, ref, n_releases=[self.n_releases])
        return {f"avg{self.n_releases}_cosine": float(rep.mean_cosine[-1])}, R, ref

    def __call__(self, release: CellRelease) -> dict[str, float]:
        return self._run(release)[0]

    def check(self, release: CellRelease) -> tuple[dict[str, float], StrengthCheck]:
        """Run on unprotected embeddings: the columns, and the averages' cosine to their
        originals against a blind guess -- the centroid of the other records -- with a normal
        interval of the mean per-record difference."""
        out, R, ref = self._run(release)
        A = _unit_rows(np.asarray(ref, dtype=np.float64))
        avg = _unit_rows(R.mean(axis=0))
        n = A.shape[0]
        total = A.sum(axis=0)
        others = _unit_rows((total[None, :] - A) / max(n - 1, 1))
        diff = np.einsum("ij,ij->i", avg, A) - np.einsum("ij,ij->i", others, A)
        half = 1.96 * float(diff.std(ddof=1)) / np.sqrt(n) if n > 1 else float("nan")
        col = f"avg{self.n_releases}_cosine"
        chance = float(np.einsum("ij,ij->i", others, A).mean())
        return out, StrengthCheck(
            self.name,
            col,
            out[col],
            chance,
            float(diff.mean()) - half,
            float(diff.mean()) + half,
            f"normal interval over {n} records",
            tuple(out),
        )


def _unit_rows(A: NDArray[np.float64]) -> NDArray[np.float64]:
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(norms > 0, norms, 1.0)


def run_on_plain(
    A: NDArray[Any], metrics: Sequence[Any], rng: np.random.Generator
) -> tuple[list[StrengthCheck], list[Mapping[str, Any]]]:
    """Every privacy metric once on the unprotected embeddings ``A``: the reference its numbers
    are read against (the same attacker trained and scored on unprotected vectors) and, for a
    metric with ``check``, whether it beats its blind baseline there at all. Returns the
    strength checks and each metric's columns, in the order of ``metrics``."""
    ident = Unprotected()
    plain = CellRelease(ident, A, ident.privatize(A), rng)
    checks: list[StrengthCheck] = []
    columns: list[Mapping[str, Any]] = []
    for m in metrics:
        check = getattr(m, "check", None)
        if callable(check):
            got, verdict = check(plain)
            checks.append(verdict.with_columns(list(got)))
        else:
            got = m(plain)
        columns.append(got)
    return checks, columns
