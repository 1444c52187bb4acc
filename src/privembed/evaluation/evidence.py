"""The project's own measured evidence, as data: a verdict is never weaker than it.

An attack run by ``advise`` on the user's data is small (a token attack trained in seconds on
the CPU); the project has run stronger ones -- the adaptive transformer inversion of
docs/attacks.md, at evidence strength on a GPU. A verdict that reads "defends" at a setting
where that stronger attack was measured to succeed would be the worst thing a privacy tool
can print. So those measurements ship with the package (``evidence.json``, with where each
came from) and :func:`with_stored_evidence` joins them to the verdict of the attacks run now.

How a study bears on a setting
------------------------------
* It matches by attack (one of the threat's), deployment mode and input dimension, and by
  mechanism: its own, or -- for a study of an isotropic mechanism -- any mechanism of its
  ``family`` (multivariate Laplace, Gaussian, Purkayastha: noise whose direction is uniform, so
  that after renormalisation a release is the clean vector turned by an angle whose law is set
  by the noise level; in d = 384 the angle is concentrated within a few percent).
* The **noise level** orders a study's rows: the expected cosine between a unit vector and its
  release (``Mechanism.expected_cosine``, a closed form) where the study compares by it, else
  epsilon for the study's own mechanism. Less noise can only help the attacker: an attacker who
  beats blind at some level beats it with less noise, and one who stays at blind stays there
  with more. So the row with the most noise that is still no noisier than the setting (largest
  cosine <= the setting's) carries its verdict when that is "does not defend" or
  "inconclusive"; the row with the least noise that is still no quieter than the setting
  (smallest cosine >= the setting's) carries "defends" -- and only on the study's own embedding
  model (``model``): a downgrade is a warning worth giving on any model of that dimension, a
  "defends" is not. When that quieter row does *not* defend, the setting lies between a
  measurement that (perhaps) defends and one that does not: it carries "inconclusive".
* The final verdict is the worst of the verdicts that rest on evidence (does not defend >
  inconclusive > defends); when neither the attacks run now nor a study bear on the setting,
  the verdict of the attacks run now stands ("no evidence", "not measured").

The monotonicity is an assumption about the attacker, stated, not proved: it holds for an
adaptive attacker retrained at each level, and the measured rows are monotone within their
intervals.

Examples
--------
>>> from privembed.evaluation.threats import THREATS, judge
>>> live = judge(THREATS["auxiliary_text"], [])
>>> live.verdict
'not measured'
>>> at = dict(mode="rerank", dim=384)
>>> with_stored_evidence(live, mechanism="laplace", epsilon=316.0, **at).verdict
'does not defend'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=50.0, **at).verdict
'not measured'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=50.0, model="all-MiniLM-L6-v2",
...                      **at).verdict
'defends'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=316.0, mode="rerank", dim=768).verdict
'not measured'
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from .threats import (
    DEFENDS,
    DOES_NOT_DEFEND,
    INCONCLUSIVE,
    AttackEvidence,
    ThreatVerdict,
    judge,
)

__all__ = [
    "Study",
    "noise_level",
    "stored_verdicts",
    "studies",
    "with_evidence",
    "with_stored_evidence",
]

#: how bad a verdict that rests on evidence is (the worst wins)
_RANK = {DEFENDS: 1, INCONCLUSIVE: 2, DOES_NOT_DEFEND: 3}


def noise_level(mechanism: str, epsilon: float, dim: int, **params: Any) -> float | None:
    """The expected cosine between a unit vector of dimension ``dim`` and its release by
    ``mechanism`` at ``epsilon`` (None where there is no closed form or no such mechanism).

    >>> round(noise_level("laplace", 200.0, 384), 3)
    0.462
    >>> round(noise_level("gaussian", 316.2, 384, delta=1e-5), 3)
    0.477
    """
    from ..mechanisms import build_mechanism

    try:
        m = build_mechanism(mechanism, epsilon=float(epsilon), **params)
    except (ValueError, TypeError):
        return None
    fn = getattr(m, "expected_cosine", None)
    value = fn(int(dim)) if callable(fn) else None
    return None if value is None else float(value)


@dataclass(frozen=True)
class Study:
    """One measured study: an attack against one mechanism in some modes, at several epsilons.

    ``rows`` are ``(run, epsilon, AttackEvidence)``: one run is one training of the attacker,
    scored on several target sets (one row per target set and epsilon). ``family``: the
    mechanisms it bears on when ``compare`` is ``"expected_cosine"`` (isotropic noise).
    """

    id: str
    attack: str
    threat: str
    mechanism: str
    family: tuple[str, ...]
    compare: str
    modes: tuple[str, ...]
    model: str
    dim: int
    setting: str
    source: str
    machine: str
    rows: tuple[tuple[str, float, AttackEvidence], ...]

    def bears_on(self, *, attacks: tuple[str, ...], mechanism: str, mode: str, dim: int) -> bool:
        """Whether the study measures this threat's attacks for this mechanism, mode and d."""
        mechs = self.family if self.compare == "expected_cosine" else (self.mechanism,)
        return (
            self.attack in attacks
            and mechanism in mechs
            and mode in self.modes
            and self.dim == int(dim)
        )

    def runs(self) -> list[str]:
        return list(dict.fromkeys(r for r, _, _ in self.rows))

    def at(self, run: str, epsilon: float) -> list[AttackEvidence]:
        return [e for r, eps, e in self.rows if r == run and eps == epsilon]

    def levels(self, run: str) -> list[tuple[float, float]]:
        """``(level, epsilon)`` of each measured epsilon of ``run``, least noise last: the
        level is the expected cosine (``compare = "expected_cosine"``) or epsilon itself."""
        return list(_levels(self.mechanism, self.dim, self.compare, self._epsilons(run)))

    def _epsilons(self, run: str) -> tuple[float, ...]:
        return tuple(sorted({e for r, e, _ in self.rows if r == run}))


@lru_cache(maxsize=64)
def _levels(
    mechanism: str, dim: int, compare: str, eps: tuple[float, ...]
) -> tuple[tuple[float, float], ...]:
    if compare == "expected_cosine":
        out = [(noise_level(mechanism, e, dim), e) for e in eps]
        return tuple(sorted((lv, e) for lv, e in out if lv is not None))
    return tuple((e, e) for e in eps)


@lru_cache(maxsize=1)
def studies() -> tuple[Study, ...]:
    """The studies shipped with the package (``privembed/evaluation/evidence.json``)."""
    text = resources.files(__package__).joinpath("evidence.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    if doc.get("format") != "privembed/evidence/v1":
        raise ValueError(f"evidence.json: unknown format {doc.get('format')!r}.")
    out = []
    for s in doc["studies"]:
        rows = tuple(
            (
                str(r["run"]),
                float(r["epsilon"]),
                AttackEvidence(
                    s["attack"],
                    r["statistic"],
                    r["value"],
                    r["blind"],
                    r["low"],
                    r["high"],
                    r["clean_excess_low"],
                ),
            )
            for r in s["rows"]
        )
        compare = s.get("compare", "epsilon")
        if compare not in ("epsilon", "expected_cosine"):
            raise ValueError(f"evidence.json: study {s['id']!r} compares by {compare!r}.")
        out.append(
            Study(
                id=s["id"], attack=s["attack"], threat=s["threat"], mechanism=s["mechanism"],
                family=tuple(s.get("family", [s["mechanism"]])), compare=compare,
                modes=tuple(s["modes"]), model=s["model"], dim=int(s["dim"]),
                setting=s["setting"], source=s["source"], machine=s["machine"], rows=rows,
            )
        )  # fmt: skip
    return tuple(out)


def stored_verdicts(
    threat: Any,
    *,
    mechanism: str,
    epsilon: float,
    mode: str,
    dim: int,
    model: str | None = None,
    params: dict[str, Any] | None = None,
    cosine: float | None = None,
) -> list[ThreatVerdict]:
    """The verdicts the shipped studies carry to this setting (see the module docstring), one
    per study run that bears on it; empty when none does. The setting's noise level is
    ``cosine`` (its expected cosine, from the built mechanism) or computed from ``mechanism``,
    ``epsilon`` and ``params`` (its other parameters, e.g. the Gaussian's delta)."""
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        return []
    out: list[ThreatVerdict] = []
    for study in studies():
        if study.threat != threat.name or not study.bears_on(
            attacks=threat.attacks, mechanism=mechanism, mode=mode, dim=dim
        ):
            continue
        if study.compare == "expected_cosine":
            level = (
                cosine
                if cosine is not None
                else noise_level(mechanism, epsilon, dim, **(params or {}))
            )
            if level is None:
                continue
            what = f"{mechanism} epsilon {epsilon:.4g} (expected cosine {level:.3f})"
        else:
            level, what = float(epsilon), f"epsilon {epsilon:.4g}"
        own_model = model is not None and study.model.lower() in str(model).lower()
        for run in study.runs():
            levels = study.levels(run)
            noisier = [x for x in levels if x[0] <= level]
            quieter = [x for x in levels if x[0] >= level]
            carried: list[tuple[tuple[float, float], str, ThreatVerdict, str]] = []
            if noisier:
                row = max(noisier)
                v = judge(threat, study.at(run, row[1]))
                if v.verdict in (DOES_NOT_DEFEND, INCONCLUSIVE):
                    carried.append((row, v.verdict, v, "at least as much noise as"))
            if quieter:
                row = min(quieter)
                v = judge(threat, study.at(run, row[1]))
                if v.verdict == DEFENDS and own_model:
                    carried.append((row, DEFENDS, v, "no more noise than"))
                elif v.verdict in (DOES_NOT_DEFEND, INCONCLUSIVE) and row[0] > level:
                    carried.append((row, INCONCLUSIVE, v, "less noise, and no defence, than"))
            for row, verdict, v, rel in carried:
                if study.compare == "expected_cosine":
                    rel = f"expected cosine {row[0]:.3f}: {rel}"
                out.append(
                    ThreatVerdict(
                        threat,
                        verdict,
                        f"stored evidence: {study.attack} against {study.mechanism} epsilon "
                        f"{row[1]:g} ({rel} {what}; {study.model}, {study.dim}-d, run {run}; "
                        f"{study.source}): {v.reason}",
                        v.evidence,
                    )
                )
    return out


def with_stored_evidence(
    live: ThreatVerdict,
    *,
    mechanism: str,
    epsilon: float | None,
    mode: str,
    dim: int,
    model: str | None = None,
    params: dict[str, Any] | None = None,
    cosine: float | None = None,
) -> ThreatVerdict:
    """The worst of ``live`` (attacks run now) and the stored studies' verdicts at the setting.

    Only verdicts that rest on evidence compete (defends, inconclusive, does not defend); when
    none does, ``live`` stands as it is.
    """
    if epsilon is None or live.threat.defended_by != "epsilon":
        return live
    stored = stored_verdicts(
        live.threat, mechanism=mechanism, epsilon=epsilon, mode=mode, dim=dim, model=model,
        params=params, cosine=cosine,
    )  # fmt: skip
    bearing = [v for v in (live, *stored) if v.verdict in _RANK]
    if not bearing:
        return live
    worst = max(bearing, key=lambda v: _RANK[v.verdict])
    if worst is live or live.verdict not in _RANK:
        return worst
    if live.verdict == worst.verdict:
        return live
    return ThreatVerdict(
        worst.threat,
        worst.verdict,
        f"{worst.reason}; the attacks run now read {live.verdict!r} ({live.reason})",
        worst.evidence,
    )


def with_evidence(
    note: Any, mechanism: Any, *, model: str | None = None, keyed: bool, ledger: bool
) -> Any:
    """``note`` (a :class:`~privembed.release.setting.SettingNote`) with what the evidence still
    says when it calls the guarantee vacuous: the verdict against an attacker with public text
    at this noise level (the stored studies; "no stored evidence" where none bears on it),
    against a repeated-release observer (keyed noise and the ledger, whatever epsilon), and
    where the candidate holder is measured. Unchanged when the guarantee is not vacuous.

    ``protect`` and ``index`` print it: no command calls a setting vacuous without saying
    which threats the evidence still covers.
    """
    import dataclasses

    from .threats import THREATS, judge_structural

    if note is None or not note.vacuous:
        return note
    config = dict(getattr(mechanism, "config", {}) or {})
    name = str(config.get("mechanism", ""))
    mode = "rerank"
    if name == "subspace":  # the studies name the law in k dimensions, and the mode
        name, mode = str(config.get("noise", "laplace")), "subspace+rerank"
    eps = config.get("epsilon")
    cos = getattr(mechanism, "expected_cosine", None)
    cosine = cos(note.dim) if callable(cos) and mode == "rerank" else None
    aux = THREATS["auxiliary_text"]
    v = with_stored_evidence(
        judge(aux, []), mechanism=name, epsilon=None if eps is None else float(eps), mode=mode,
        dim=note.dim, model=model, cosine=cosine,
    )  # fmt: skip
    lines = [
        (
            f"evidence against {aux.title}: {v.verdict} -- {v.reason}"
            if v.verdict in _RANK
            else f"evidence against {aux.title}: none stored for this mechanism and dimension "
            "(run 'privembed advise --texts' to measure it)"
        ),
        "evidence against a repeated-release observer: "
        + judge_structural(THREATS["repeated_release"], keyed=keyed, ledger=ledger).verdict
        + (" (keyed noise and the ledger, whatever epsilon)" if keyed and ledger else
           " (give --key-file and --ledger: averaging fresh releases cancels the noise)"),
        "evidence against a candidate holder: measured by 'privembed advise' (linkage at this "
        "setting); at epsilons where search is useful it re-identifies most records",
    ]  # fmt: skip
    return dataclasses.replace(note, evidence=tuple(lines))
