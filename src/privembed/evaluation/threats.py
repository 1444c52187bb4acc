"""Threat models as data: who the attacker is, what they hold, which attacks measure them, and
the rule that turns measured attacks into "defends" / "does not defend" / "no evidence".

A privacy claim about a setting is only meaningful against a named attacker. The same vectors
can be safe from an attacker who holds the protected store only and wide open to one who holds
candidate texts: at an epsilon where private search is useful, linking each protected vector to
its original among candidates succeeds almost always (issue 30). This module names those
attackers once (:data:`THREATS`), and :func:`judge` applies one rule to measured attack results
(:class:`AttackEvidence`):

* an attack whose 95% interval of (clean value - blind baseline) on **unprotected** vectors
  does not lie wholly above the threat's ``margin`` is too weak to be evidence about
  protection: the threat gets :data:`NO_EVIDENCE` (never "defends": an attack that cannot beat
  blind by the margin on clean vectors cannot show, by staying within the margin on protected
  ones, that the noise stopped it);
* among the attacks strong enough, the strongest one's excess over its blind baseline at the
  setting decides: the whole 95% interval at or below the threat's ``margin`` ->
  :data:`DEFENDS`; the whole interval above it -> :data:`DOES_NOT_DEFEND`; the interval
  straddling the margin -> :data:`INCONCLUSIVE` (more records are needed to say either);
* a threat no measured attack covers is :data:`NOT_MEASURED` -- the store-only attacker
  included: no attack without auxiliary data is implemented, and what the attacker with public
  text's attacks show is not a proof about attacks nobody ran, so its verdict is quoted in the
  reason, never promoted to "defends";
* :func:`privembed.evaluation.evidence.with_stored_evidence` then joins the project's stored
  studies (the GPU inversion of docs/attacks.md): a verdict is never weaker than them;
* a threat defended by the deployment rather than by epsilon (the repeated-release observer:
  keyed noise and the ledger) is judged from the deployment facts (:func:`judge_structural`).

Examples
--------
>>> t = THREATS["candidate_holder"]
>>> ev = AttackEvidence("linkage", "reid@1", value=0.97, blind=0.001, low=0.96, high=0.98,
...                     clean_excess_low=0.99)
>>> judge(t, [ev]).verdict
'does not defend'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..attacks.base import AttackResult
from ..core._validation import check_real

__all__ = [
    "DEFENDS",
    "DOES_NOT_DEFEND",
    "INCONCLUSIVE",
    "NOT_MEASURED",
    "NO_EVIDENCE",
    "THREATS",
    "AttackEvidence",
    "ThreatModel",
    "ThreatVerdict",
    "judge",
    "judge_sealed",
    "judge_structural",
    "threats_for",
]

#: the strongest attack stays within the margin of its blind baseline (whole 95% interval)
DEFENDS = "defends"
#: the strongest attack beats its blind baseline by more than the margin (whole 95% interval)
DOES_NOT_DEFEND = "does not defend"
#: no attack of the threat was strong enough on clean vectors to be evidence either way
NO_EVIDENCE = "no evidence (attack too weak on clean vectors)"
#: the interval straddles the margin: neither claim can be made at this sample size
INCONCLUSIVE = "inconclusive (interval straddles the margin)"
#: no attack of the threat was run
NOT_MEASURED = "not measured"

VERDICTS = (DEFENDS, DOES_NOT_DEFEND, NO_EVIDENCE, INCONCLUSIVE, NOT_MEASURED)


@dataclass(frozen=True)
class ThreatModel:
    """One attacker: what they hold, which attacks measure them, and when a setting defends.

    Attributes
    ----------
    name : str
        Registry key.
    title : str
        A short phrase for tables.
    holds : str
        What the attacker holds, in words.
    attacks : tuple of str
        Names of the attacks whose results bear on this threat (an :class:`AttackEvidence`'s
        ``attack``).
    margin : float
        How far above its blind baseline the strongest attack may be (absolute, in the units of
        its statistic) for the setting to defend.
    defended_by : str
        ``"epsilon"`` (the noise is the defence: judged by :func:`judge`) or ``"deployment"``
        (keyed noise and the ledger: judged by :func:`judge_structural`).
    modes : tuple of str or None
        The deployment modes where the threat arises (None: every mode).
    note : str
        What a reader must know about the verdict.
    implied_by : str, optional
        A stronger threat model (by name) whose verdict is quoted in this one's reason; this
        one stays "not measured" (no attack of its own), whatever that verdict.
    """

    name: str
    title: str
    holds: str
    attacks: tuple[str, ...]
    margin: float
    defended_by: str = "epsilon"
    modes: tuple[str, ...] | None = None
    note: str = ""
    implied_by: str | None = None

    def __post_init__(self) -> None:
        check_real("margin", self.margin, ge=0, le=1)
        if self.defended_by not in ("epsilon", "deployment"):
            raise ValueError(
                "defended_by must be 'epsilon' or 'deployment', got "
                f"defended_by={self.defended_by!r}."
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "holds": self.holds,
            "attacks": list(self.attacks),
            "margin": self.margin,
            "defended_by": self.defended_by,
            "modes": None if self.modes is None else list(self.modes),
            "note": self.note,
            "implied_by": self.implied_by,
        }


@dataclass(frozen=True)
class AttackEvidence:
    """One attack's result at a setting, with its blind baseline and its strength on clean data.

    Attributes
    ----------
    attack : str
        The attack's name (matched against :attr:`ThreatModel.attacks`).
    statistic : str
        The column judged (e.g. ``"reid@1"``).
    value : float
        Its value against the protected vectors.
    blind : float
        A blind attacker's value (random guess, frequency prior, ...).
    low, high : float
        95% interval of ``value`` at the setting.
    clean_excess_low : float
        Lower end of the 95% interval of (value on unprotected vectors - blind): at or below
        the threat's margin, the attack does not beat blind on clean vectors by enough to be
        evidence.
    clean : float, optional
        Its value on unprotected vectors (what the strength check measured), when known.
    """

    attack: str
    statistic: str
    value: float
    blind: float
    low: float
    high: float
    clean_excess_low: float
    clean: float | None = None

    def __post_init__(self) -> None:
        for name in ("value", "blind", "low", "high", "clean_excess_low"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or math.isnan(float(v)):
                raise ValueError(f"{name} must be a number, got {name}={v!r}.")
        if not self.low <= self.value <= self.high:
            raise ValueError(
                f"the interval must hold the value, got low={self.low!r}, value={self.value!r}, "
                f"high={self.high!r}."
            )

    @classmethod
    def from_results(cls, at: AttackResult, clean: AttackResult) -> AttackEvidence:
        """Evidence from an attack's result at the setting and on unprotected vectors.

        Examples
        --------
        >>> at = AttackResult("linkage", "reid@1", 0.4, 0.01, 0.35, 0.45)
        >>> clean = AttackResult("linkage", "reid@1", 1.0, 0.01, 0.98, 0.99)
        >>> e = AttackEvidence.from_results(at, clean); (e.low, e.high, e.strong)
        (0.36, 0.46, True)
        """
        if (at.attack, at.statistic) != (clean.attack, clean.statistic):
            raise ValueError(
                f"the clean result must be of the same attack and statistic, got "
                f"{clean.attack}/{clean.statistic} for {at.attack}/{at.statistic}."
            )
        low, high = at.blind + at.excess_low, at.blind + at.excess_high
        return cls(
            at.attack, at.statistic, at.value, at.blind, min(low, at.value), max(high, at.value),
            clean.excess_low, clean.value,
        )  # fmt: skip

    @property
    def strong(self) -> bool:
        """Whether the attack beat its blind baseline on unprotected vectors (95%)."""
        return self.clean_excess_low > 0

    def strength_text(self, margin: float) -> str:
        """How strong the attack was on unprotected vectors, in words (advise prints it)."""
        clean = "" if self.clean is None else f"{self.clean:.3f} "
        verdict = (
            "evidence"
            if self.strong_for(margin)
            else f"too weak to be evidence (needs more than {margin:g} above blind)"
        )
        return (
            f"{self.attack} {self.statistic} on unprotected vectors {clean}vs blind "
            f"{self.blind:.3f}, lower end of the excess {self.clean_excess_low:+.3f}: {verdict}"
        )

    def strong_for(self, margin: float) -> bool:
        """Whether the attack beat its blind baseline on unprotected vectors by more than
        ``margin`` (the whole 95% interval): only such an attack staying within the margin on
        protected vectors is evidence that the noise stopped it."""
        return self.clean_excess_low > margin

    @property
    def excess(self) -> tuple[float, float, float]:
        """(value, low, high) minus the blind baseline."""
        return self.value - self.blind, self.low - self.blind, self.high - self.blind

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "statistic": self.statistic,
            "value": self.value,
            "blind": self.blind,
            "low": self.low,
            "high": self.high,
            "clean_excess_low": self.clean_excess_low,
            "clean": self.clean,
            "strong": self.strong,
        }


@dataclass(frozen=True)
class ThreatVerdict:
    """What :func:`judge` found for one threat at one setting."""

    threat: ThreatModel
    verdict: str
    reason: str
    evidence: AttackEvidence | None = None

    @property
    def defends(self) -> bool:
        return self.verdict == DEFENDS

    def text(self) -> str:
        """One line: ``against <title>: <verdict> -- <reason>``."""
        return f"against {self.threat.title}: {self.verdict} -- {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "threat": self.threat.name,
            "verdict": self.verdict,
            "defends": self.defends,
            "reason": self.reason,
            "evidence": None if self.evidence is None else self.evidence.to_dict(),
        }


def _registry(*threats: ThreatModel) -> Mapping[str, ThreatModel]:
    return MappingProxyType({t.name: t for t in threats})


#: The threat models advise and the docs name (read-only).
THREATS: Mapping[str, ThreatModel] = _registry(
    ThreatModel(
        name="store_only",
        title="a store-only attacker",
        holds="the protected vectors and sealed payloads in the store, nothing else",
        attacks=(),
        margin=0.02,
        implied_by="auxiliary_text",
        note="no attack that needs no auxiliary data is implemented, so it is not measured; "
        "the verdict against the attacker with public text (who holds more) is quoted beside "
        "it, but a measured attack failing is no proof that an unmeasured one fails",
    ),
    ThreatModel(
        name="auxiliary_text",
        title="an attacker with public text",
        holds="the protected store and public text of the same kind, to train attacks (token "
        "inference, inversion, attribute probes) on vectors protected the same way",
        attacks=("token_inference", "inversion", "attribute"),
        margin=0.02,
        note="an inversion model too weak to invert clean vectors is no evidence: such rows "
        "never read 'defends'",
    ),
    ThreatModel(
        name="candidate_holder",
        title="a candidate holder",
        holds="candidate texts or their embeddings (a leaked index, the public corpus) among "
        "which the records' sources are",
        attacks=("linkage",),
        margin=0.02,
        note="what makes a protected vector findable by its own text makes it linkable: at any "
        "epsilon where search is useful, re-identification among candidates succeeds for most "
        "records; no such setting prevents it",
    ),
    ThreatModel(
        name="repeated_release",
        title="a repeated-release observer",
        holds="several releases of the same records (re-indexing, retries) to average",
        attacks=("averaging",),
        margin=0.0,
        defended_by="deployment",
        note="averaging fresh noise cancels it whatever epsilon is; keyed noise (the same "
        "content gets the same noise) and the ledger (fresh releases are charged) defend, "
        "epsilon does not",
    ),
    ThreatModel(
        name="basis_holder",
        title="a basis holder",
        holds="the subspace basis and centre as well as candidate embeddings (a leaked sealed "
        "basis file), so candidates can be projected as the records were",
        attacks=("linkage_basis",),
        margin=0.02,
        modes=("subspace+rerank",),
        note="the basis stays sealed with the key holder; this is the candidate holder who also "
        "obtained it",
    ),
)


def threats_for(mode: str) -> list[ThreatModel]:
    """The threat models that arise in a deployment mode (all but the mode-specific others).

    Examples
    --------
    >>> [t.name for t in threats_for("plain")]
    ['store_only', 'auxiliary_text', 'candidate_holder', 'repeated_release']
    >>> "basis_holder" in [t.name for t in threats_for("subspace+rerank")]
    True
    """
    return [t for t in THREATS.values() if t.modes is None or mode in t.modes]


#: why a threat defended by the other means cannot be judged here, by the judge's means
_OTHER_JUDGE = {
    "epsilon": "is defended by the deployment, not by epsilon: use judge_structural.",
    "deployment": "is defended by epsilon: judge it on attack results.",
}


def _check_threat(threat: Any, defended_by: str | None = None) -> None:
    """``threat`` is a ThreatModel, and defended by ``defended_by`` where one is given."""
    if not isinstance(threat, ThreatModel):
        raise TypeError(f"threat must be a ThreatModel, got threat={threat!r}.")
    if defended_by is not None and threat.defended_by != defended_by:
        raise ValueError(f"threat {threat.name!r} {_OTHER_JUDGE[defended_by]}")


def judge(threat: ThreatModel, evidence: Sequence[AttackEvidence]) -> ThreatVerdict:
    """The verdict of the measured attacks on one threat (see the module docstring's rule).

    Parameters
    ----------
    threat : ThreatModel
        Must be defended by epsilon (``defended_by="epsilon"``).
    evidence : sequence of AttackEvidence
        Results at the setting; those whose ``attack`` the threat does not list are ignored.

    Examples
    --------
    >>> t = THREATS["auxiliary_text"]
    >>> weak = AttackEvidence("inversion", "bleu", 0.01, 0.02, 0.0, 0.03, clean_excess_low=-0.01)
    >>> judge(t, [weak]).verdict
    'no evidence (attack too weak on clean vectors)'
    >>> ok = AttackEvidence("token_inference", "leakage", 0.27, 0.26, 0.265, 0.275, 0.1)
    >>> judge(t, [weak, ok]).verdict
    'defends'
    """
    _check_threat(threat, "epsilon")
    if threat.implied_by is not None:
        stronger = judge(THREATS[threat.implied_by], evidence)
        return ThreatVerdict(
            threat,
            NOT_MEASURED,
            f"no attack without auxiliary data is implemented; against {stronger.threat.title} "
            f"(stronger): {stronger.verdict}",
        )
    mine = [e for e in evidence if e.attack in threat.attacks]
    if not mine:
        return ThreatVerdict(
            threat, NOT_MEASURED, f"none of its attacks ({', '.join(threat.attacks)}) was run"
        )
    strong = [e for e in mine if e.strong_for(threat.margin)]
    if not strong:
        names = ", ".join(sorted({e.attack for e in mine}))
        return ThreatVerdict(
            threat,
            NO_EVIDENCE,
            f"{names} did not beat its blind baseline by the margin ({threat.margin:g}) on "
            "unprotected vectors, so its failure on protected ones says nothing",
        )
    # the strongest: the largest upper end of the excess, then the largest point estimate
    best = max(strong, key=lambda e: (e.excess[2], e.excess[0]))
    _, lo, hi = best.excess
    nums = (
        f"{best.attack} {best.statistic} {best.value:.3f} vs blind {best.blind:.3f} "
        f"(95% interval of the excess [{lo:+.3f}, {hi:+.3f}], margin {threat.margin:g})"
    )
    if hi <= threat.margin:
        return ThreatVerdict(threat, DEFENDS, nums, best)
    if lo > threat.margin:
        return ThreatVerdict(threat, DOES_NOT_DEFEND, nums, best)
    return ThreatVerdict(threat, INCONCLUSIVE, nums, best)


def judge_sealed(threat: ThreatModel) -> ThreatVerdict:
    """The verdict on any threat in the sealed mode: the store holds AES-256-GCM ciphertext
    of padded payloads and no vector, so every attacker without the key -- the store holder,
    one with public text, one with candidate texts, one who collects repeated releases --
    faces encryption, not noise. Computational security (AES-GCM under a key the attacker does
    not hold), not differential privacy; what remains visible is stated in the reason.

    Examples
    --------
    >>> judge_sealed(THREATS["candidate_holder"]).verdict
    'defends'
    """
    _check_threat(threat)
    return ThreatVerdict(
        threat,
        DEFENDS,
        "sealed: the store holds AES-256-GCM ciphertext and no vector; without the key an "
        "attacker sees the record count, the padded payload sizes and when a client fetches "
        "(always every payload, once per session or once per query, so the access pattern says "
        "nothing about any query); defended by encryption, not by epsilon",
    )


def judge_structural(threat: ThreatModel, *, keyed: bool, ledger: bool) -> ThreatVerdict:
    """The verdict on a threat the deployment defends (keyed noise and the ledger).

    Examples
    --------
    >>> t = THREATS["repeated_release"]
    >>> judge_structural(t, keyed=True, ledger=True).verdict
    'defends'
    >>> judge_structural(t, keyed=False, ledger=True).verdict
    'does not defend'
    """
    _check_threat(threat, "deployment")
    if keyed and ledger:
        return ThreatVerdict(
            threat,
            DEFENDS,
            "keyed noise returns the same vector for the same content and the ledger charges "
            "every fresh release (not epsilon)",
        )
    missing = " and ".join(
        n for n, on in (("keyed noise (--key)", keyed), ("a ledger", ledger)) if not on
    )
    return ThreatVerdict(
        threat,
        DOES_NOT_DEFEND,
        f"without {missing}, averaging fresh releases cancels the noise at any epsilon",
    )
