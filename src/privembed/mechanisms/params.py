"""Every keyword a registered mechanism's constructor takes, described once (issue 25.2).

A parameter's meaning lives here; which mechanisms take it is read from their constructors, so
a command's help says it without a list of names to keep up to date:

>>> describe("mask_delta")
'delta added to the mask (mahalanobis).'
>>> describe("input_norm")            # every mechanism takes it: no list
'How inputs reach the unit sphere.'

The type of a parameter is its constructor's annotation (``-p NAME=VALUE`` is parsed by it,
:func:`privembed.mechanisms.parse_parameter`); the privacy parameter a sweep moves and what a
mechanism requires are read from the class (``privacy_parameter``, ``needs``).
``tests/mechanisms/test_descriptor.py`` fails when a registered mechanism takes a keyword that
is not described here, and when a command's help for a mechanism option is not :func:`describe`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PARAMETERS", "Parameter", "describe", "takers"]


@dataclass(frozen=True)
class Parameter:
    """What a constructor keyword means, in one line (the help of its command-line option)."""

    help: str


#: constructor keyword -> its meaning, for every keyword of the registered mechanisms
PARAMETERS: dict[str, Parameter] = {
    "epsilon": Parameter("Privacy parameter epsilon."),
    "delta": Parameter("delta of the (epsilon, delta) guarantee."),
    "calibration": Parameter("How sigma is calibrated to (epsilon, delta)."),
    "sensitivity": Parameter("l2 sensitivity; 2 for the unit sphere."),
    "input_norm": Parameter("How inputs reach the unit sphere."),
    "renormalize": Parameter("Unit-length outputs."),
    "sigma": Parameter("Noise scale."),
    "report_delta": Parameter("delta at which the implied epsilon is reported."),
    "covariance": Parameter("Covariance .npy, (d,) or (d, d)."),
    "mask": Parameter("Concept mask .npy or profile .npz."),
    "mask_delta": Parameter("delta added to the mask."),
    "smoothing": Parameter("Covariance smoothing lambda in [0, 1]."),
    "k": Parameter("Output dimension."),
    "kind": Parameter("Public matrix kind."),
    "neighbouring": Parameter("Neighbouring relation."),
    "projection_seed": Parameter("Public projection seed."),
    "input_dim": Parameter("Build the projection for this input dimension now."),
    "basis": Parameter("Subspace basis: a basis object or file, or an array (m, d)."),
    "noise": Parameter("Noise law in the subspace."),
    "mean": Parameter("The centre of a bare-array basis."),
    "basis_epsilon": Parameter("epsilon of a DP-PCA basis (central)."),
    "basis_delta": Parameter("delta of a DP-PCA basis (central)."),
    "basis_noise_multiplier": Parameter("Noise multiplier of a DP-PCA basis (central)."),
}


def takers(name: str) -> list[str]:
    """The registered mechanisms whose constructor takes keyword ``name``, in registry order."""
    from . import MECHANISMS

    return [n for n, cls in MECHANISMS.items() if name in cls.parameter_names()]


def describe(name: str) -> str:
    """The help of keyword ``name``: its meaning and, unless every mechanism takes it, which do.

    Raises
    ------
    KeyError
        ``name`` is described nowhere (a mechanism registered with an undescribed keyword).
    """
    from . import MECHANISMS

    if name not in PARAMETERS:
        raise KeyError(f"mechanism parameter {name!r} is not described in PARAMETERS.")
    text = PARAMETERS[name].help
    who = takers(name)
    if not who or len(who) == len(MECHANISMS):
        return text
    return f"{text.rstrip('.')} ({', '.join(who)})."
