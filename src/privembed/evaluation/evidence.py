"""The project's own measured evidence, as data: a verdict is never weaker than it.

An attack run by ``advise`` on the user's data is small (a token attack trained in seconds on
the CPU); the project has run stronger ones -- the adaptive transformer inversion of
docs/attacks.md, at evidence strength on a GPU. A verdict that reads "defends" at a setting
where that stronger attack was measured to succeed would be the worst thing a privacy tool
can print. So those measurements ship with the package (``evidence.json``, with where each
came from) and :func:`with_stored_evidence` joins them to the verdict of the attacks run now:

* a study matches a setting by attack (one of the threat's), mechanism, deployment mode and
  input dimension (epsilon means another noise radius at another dimension);
* **monotonicity in epsilon** (a larger epsilon is less noise: an attacker who beats blind at
  epsilon_r beats it at least as well at any epsilon >= epsilon_r, and one who stays at blind
  at epsilon_r stays there for any smaller epsilon) carries a study's rows: its verdict at the
  largest measured epsilon_r <= epsilon carries up when it is "does not defend" or
  "inconclusive" (or when epsilon_r = epsilon); its verdict at the smallest epsilon_r >= epsilon
  carries down when it is "defends" -- and only for the study's own embedding model (named by
  ``model``): a downgrade is a warning worth giving on any model of that dimension, a
  "defends" is not;
* the final verdict is the worst of the verdicts that rest on evidence (does not defend >
  inconclusive > defends); when neither the attacks run now nor a study bear on the setting,
  the verdict of the attacks run now stands ("no evidence", "not measured").

The assumption behind the carrying is stated, not proved: it holds for the adaptive attacker
that is retrained at each epsilon (the measured rows are monotone within their intervals).

Examples
--------
>>> from privembed.evaluation.threats import THREATS, judge
>>> live = judge(THREATS["auxiliary_text"], [])
>>> live.verdict
'not measured'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=316.0, mode="rerank", dim=384).verdict
'does not defend'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=50.0, mode="rerank", dim=384,
...                      model="sentence-transformers/all-MiniLM-L6-v2").verdict
'defends'
>>> with_stored_evidence(live, mechanism="laplace", epsilon=50.0, mode="rerank", dim=384).verdict
'not measured'
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

__all__ = ["Study", "stored_verdicts", "studies", "with_stored_evidence"]

#: how bad a verdict that rests on evidence is (the worst wins)
_RANK = {DEFENDS: 1, INCONCLUSIVE: 2, DOES_NOT_DEFEND: 3}


@dataclass(frozen=True)
class Study:
    """One measured study: an attack against one mechanism in some modes, at several epsilons.

    ``rows`` are ``(run, epsilon, AttackEvidence)``: one run is one training of the attacker,
    scored on several target sets (one row per target set and epsilon).
    """

    id: str
    attack: str
    threat: str
    mechanism: str
    modes: tuple[str, ...]
    model: str
    dim: int
    setting: str
    source: str
    machine: str
    rows: tuple[tuple[str, float, AttackEvidence], ...]

    def matches(self, *, attack: str, mechanism: str, mode: str, dim: int) -> bool:
        return (
            self.attack == attack
            and self.mechanism == mechanism
            and mode in self.modes
            and self.dim == int(dim)
        )

    def runs(self) -> list[str]:
        return list(dict.fromkeys(r for r, _, _ in self.rows))

    def at(self, run: str, epsilon: float) -> list[AttackEvidence]:
        return [e for r, eps, e in self.rows if r == run and eps == epsilon]

    def epsilons(self, run: str) -> list[float]:
        return sorted({eps for r, eps, _ in self.rows if r == run})


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
        out.append(
            Study(
                id=s["id"],
                attack=s["attack"],
                threat=s["threat"],
                mechanism=s["mechanism"],
                modes=tuple(s["modes"]),
                model=s["model"],
                dim=int(s["dim"]),
                setting=s["setting"],
                source=s["source"],
                machine=s["machine"],
                rows=rows,
            )
        )
    return tuple(out)


def stored_verdicts(
    threat: Any, *, mechanism: str, epsilon: float, mode: str, dim: int, model: str | None = None
) -> list[ThreatVerdict]:
    """The verdicts the shipped studies carry to this setting (see the module docstring), one
    per study run that bears on it; empty when none does."""
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        return []
    out: list[ThreatVerdict] = []
    for study in studies():
        if study.threat != threat.name or not any(
            study.matches(attack=a, mechanism=mechanism, mode=mode, dim=dim) for a in threat.attacks
        ):
            continue
        own_model = model is not None and study.model.lower() in str(model).lower()
        for run in study.runs():
            eps = study.epsilons(run)
            below = [e for e in eps if e <= epsilon]
            above = [e for e in eps if e >= epsilon]
            for at, carries in (
                (max(below) if below else None, (DOES_NOT_DEFEND, INCONCLUSIVE)),
                (min(above) if above and own_model else None, (DEFENDS,)),
            ):
                if at is None:
                    continue
                v = judge(threat, study.at(run, at))
                exact = at == epsilon and (own_model or v.verdict != DEFENDS)
                if v.verdict in carries or (exact and v.verdict in _RANK):
                    where = "at" if at == epsilon else ("up to" if at > epsilon else "from")
                    out.append(
                        ThreatVerdict(
                            threat,
                            v.verdict,
                            f"stored evidence ({study.attack} {where} epsilon {at:g}, "
                            f"{study.model} {study.dim}-d, run {run}; {study.source}): "
                            f"{v.reason}",
                            v.evidence,
                        )
                    )
                    break  # the row at epsilon itself counts once
    return out


def with_stored_evidence(
    live: ThreatVerdict,
    *,
    mechanism: str,
    epsilon: float | None,
    mode: str,
    dim: int,
    model: str | None = None,
) -> ThreatVerdict:
    """The worst of ``live`` (attacks run now) and the stored studies' verdicts at the setting.

    Only verdicts that rest on evidence compete (defends, inconclusive, does not defend); when
    none does, ``live`` stands as it is.
    """
    if epsilon is None or live.threat.defended_by != "epsilon":
        return live
    stored = stored_verdicts(
        live.threat, mechanism=mechanism, epsilon=epsilon, mode=mode, dim=dim, model=model
    )
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
