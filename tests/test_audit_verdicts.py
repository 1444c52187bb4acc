"""privembed.audit: three verdicts, the keyed noise path, and a white box from first principles.

Issue 24, finding 12 (reproduced on the code before this change): an audit with too few draws,
or of a claim above what N draws can certify, printed a green "consistent" -- also for planted
bugs; keyed noise was never audited; and the white-box check read the mechanism's own
``sensitivity``, ``covariance_diagonal`` and ``angle_table`` as ground truth. Each planted bug
below is written as the attack on the audit that it is, and failed before the fix.

Criteria (fixed seeds throughout):

* *consistent* means no violation was found **and** the audit resolved the claim: the claim is
  within what the test draws can certify (the ln N ceiling), and either the white box bounds
  the privacy the sampled noise gives by ``resolution`` x the claim (its interval at level
  1 - 1e-5, about 4.4 standard errors), or the sampling audit's expected bound for a correct
  mechanism reaches claim / ``resolution`` at this N (exact law of the score);
* anything short of that is *inconclusive*, with the reason and the draws that would be needed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

import privembed.release.core as release_module
from privembed.audit import audit, max_certifiable_epsilon, whitebox_check
from privembed.core.rng import NoiseSource
from privembed.mechanisms import (
    MECHANISMS,
    GaussianMechanism,
    LaplaceMechanism,
    get_mechanism,
)
from privembed.mechanisms import mahalanobis as mahalanobis_module
from privembed.mechanisms.purkayastha import AngleTable, PurkayasthaMechanism

runner = CliRunner()


def _app():
    from privembed.cli import app

    return app


# ---- planted bugs -----------------------------------------------------------------------------
class ScaledLaplace(LaplaceMechanism):
    """Laplace whose radius is Gamma(d, 0.8/epsilon): the release is (1.25 epsilon)-d_X while
    it claims epsilon-d_X."""

    def _perturb(self, X, source):
        n, d = X.shape
        u, g = source.normal_gamma(n, d, float(d))
        u *= (0.8 * g / self.epsilon / np.sqrt(np.einsum("ij,ij->i", u, u)))[:, None]
        return X + u


class _WideTable(AngleTable):
    """The angle table of epsilon x 1.25: outputs closer to the input than the claim allows."""

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(1.25 * epsilon, d)


class TableBugPurkayastha(PurkayasthaMechanism):
    """Purkayastha whose ``angle_table`` (used by the sampler) is the law of 1.25 epsilon."""

    def angle_table(self, d):
        return _WideTable(self.epsilon, d)


class AngleScaledPurkayastha(PurkayasthaMechanism):
    """Purkayastha whose sampler shrinks every angle by 0.8 after a correct table (the table
    itself is right: only sampling can see this one)."""

    def _perturb(self, X, source):
        n, d = X.shape
        u = source.uniform(n, 2)
        theta = self.angle_table(d).sample(u[:, 0], u[:, 1]) * 0.8
        v = source.normal(n, d)
        v -= np.einsum("ij,ij->i", v, X)[:, None] * X
        v *= (np.sin(theta) / np.sqrt(np.einsum("ij,ij->i", v, v)))[:, None]
        v += np.cos(theta)[:, None] * X
        return v


class _ScaledNormals(NoiseSource):
    """A noise source whose normals are 0.8 x what they should be (the keyed-path bug)."""

    def __init__(self, inner: NoiseSource) -> None:
        self.inner = inner

    def normal(self, n, k):
        return 0.8 * self.inner.normal(n, k)

    def uniform(self, n, k):
        return self.inner.uniform(n, k)

    def gamma(self, shape, n):
        return self.inner.gamma(shape, n)

    def normal_gamma(self, n, k, shape):
        u, g = self.inner.normal_gamma(n, k, shape)
        return 0.8 * u, g


def _plant_keyed_sigma_bug(monkeypatch, only: str | None = None) -> None:
    """sigma x 0.8 on the keyed path only (``only``: on that keyed generator only)."""
    real = release_module.keyed_source

    def buggy(key, tags, *, generator="philox"):
        src = real(key, tags, generator=generator)
        return src if only not in (None, generator) else _ScaledNormals(src)

    monkeypatch.setattr(release_module, "keyed_source", buggy)


# ---- three verdicts -----------------------------------------------------------------------------
@pytest.mark.slow
def test_laplace_scale_bug_without_whitebox_at_100_samples_is_inconclusive(monkeypatch):
    monkeypatch.setitem(MECHANISMS, "laplace", ScaledLaplace)
    args = ["audit", "-m", "laplace", "--epsilon", "1", "--dim", "2", "--samples", "100"]
    args += ["--no-whitebox", "--seed", "0"]
    r = runner.invoke(_app(), [*args, "--json", "--fail-unless-consistent"])
    assert r.exit_code == 4, r.output
    out = json.loads(r.stdout)
    assert out["verdict"] == "inconclusive" and out["whitebox"] is None
    assert "white box is off" in out["reason"]
    assert out["needed_samples"] > 100  # what sampling alone would need at this resolution
    assert "INCONCLUSIVE" in r.stderr
    # not a violation: --fail-on-violation alone does not fail the run
    r = runner.invoke(_app(), [*args, "--fail-on-violation"])
    assert r.exit_code == 0, r.output
    assert "inconclusive" in r.stdout


@pytest.mark.parametrize("cls", [TableBugPurkayastha, AngleScaledPurkayastha])
@pytest.mark.parametrize(("d", "n"), [(2, 200), (2, 1000), (16, 1000)])
def test_purkayastha_angle_law_bug_at_small_n_is_never_consistent(cls, d, n):
    r = audit(cls(epsilon=1.0), dim=d, samples=n, rng=3)
    assert r.verdict in ("inconclusive", "violation"), (r.verdict, r.reason)


def test_table_bug_is_a_violation_at_any_n_and_names_the_table():
    wb = whitebox_check(TableBugPurkayastha(epsilon=1.0), dim=8, samples=100, rng=0)
    assert wb.verdict == "violation" and "angle table" in wb.reason
    check = next(c for c in wb.checks if "angle table" in c.name)
    assert not check.passed and check.deviation > 1e-3


@pytest.mark.slow
def test_a_claim_above_the_ceiling_is_inconclusive_even_when_the_whitebox_agrees():
    # classic sigma at epsilon = 50 reports the delta it really has (0.586): an honest claim,
    # but 50 nats is beyond any 1e4-draw sampling audit (ceiling 7.9)
    honest = get_mechanism("gaussian", epsilon=50.0, delta=1e-5, calibration="classic")
    r = audit(honest, dim=16, samples=20_000, rng=4)
    assert r.whitebox.verdict == "consistent"
    assert r.verdict == "inconclusive" and "ceiling" in r.reason
    assert r.ceiling < 50
    # the draws whose ceiling reaches 50: about ln(2 / 0.05) e^50 / (1 - delta) test draws per
    # side, twice that in all (half select the threshold); the forward formula agrees
    want = math.log(40) * math.exp(50) / (1 - r.delta) / 0.5
    assert r.needed_samples == pytest.approx(want, rel=1e-3)
    test = int(r.needed_samples * 0.5)
    assert max_certifiable_epsilon(test, delta=r.delta) >= 50.0
    assert max_certifiable_epsilon(int(test * 0.99), delta=r.delta) < 50.0
    out = r.to_dict()
    assert out["verdict"] == "inconclusive" and out["needed_samples"] == r.needed_samples


def test_the_whitebox_says_inconclusive_when_its_interval_is_too_wide():
    # 300 angles at d = 16: the epsilon interval is far wider than 25% of the claim
    wb = whitebox_check(get_mechanism("purkayastha", epsilon=1.0), dim=16, samples=300, rng=0)
    assert wb.verdict == "inconclusive" and wb.epsilon_high > 1.25
    assert wb.samples_needed > 300
    # ... and with the draws it asked for, it resolves the claim
    more = whitebox_check(
        get_mechanism("purkayastha", epsilon=1.0), dim=16, samples=int(wb.samples_needed), rng=1
    )
    assert more.verdict == "consistent" and more.epsilon_high <= 1.25


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params", "d"),
    [
        ("gaussian", {"epsilon": 2.0, "delta": 1e-5}, 8),
        ("empirical", {"sigma": 4.0}, 8),
        ("laplace", {"epsilon": 1.0}, 2),
        ("mahalanobis", {"epsilon": 1.0, "mask": [1, 0, 0, 1, 0, 0, 1, 1], "smoothing": 0.3}, 8),
        ("purkayastha", {"epsilon": 2.0}, 4),
        ("projection", {"k": 4, "epsilon": 2.0, "delta": 1e-5}, 8),
        ("projection", {"k": 4, "epsilon": 2.0, "delta": 1e-5, "neighbouring": "attribute"}, 8),
    ],
)
def test_correct_mechanisms_at_adequate_n_read_consistent(name, params, d):
    r = audit(get_mechanism(name, **params), dim=d, samples=20_000, rng=21)
    assert r.verdict == "consistent", r.reason
    assert r.whitebox.verdict == "consistent" and all(c.passed for c in r.whitebox.checks)
    assert r.needed_samples is None


def test_full_covariance_mahalanobis_is_audited_from_its_parameters():
    # a full Sigma was refused before (only the diagonal was exposed); it is rebuilt here
    a = np.array([[2.0, 0.6, 0.0, 0.0], [0.6, 1.0, 0.2, 0.0], [0.0, 0.2, 0.5, 0.1]])
    cov = a.T @ a + 0.3 * np.eye(4)
    r = audit(get_mechanism("mahalanobis", epsilon=1.0, covariance=cov), dim=4, samples=20_000,
              rng=2)  # fmt: skip
    assert r.verdict == "consistent", r.reason


# ---- keyed noise ----------------------------------------------------------------------------
@pytest.mark.slow
def test_keyed_sigma_bug_is_caught_only_by_the_keyed_audit(monkeypatch):
    _plant_keyed_sigma_bug(monkeypatch)
    m = get_mechanism("gaussian", epsilon=2.0, delta=1e-5)
    seeded = audit(m, dim=8, samples=4000, rng=5)
    assert seeded.verdict == "consistent"  # the bug is not on the seeded path
    keyed = audit(m, dim=8, samples=4000, noise="keyed", generator="philox", rng=5)
    assert keyed.noise == "keyed" and keyed.generator == "philox"
    assert keyed.verdict == "violation" and keyed.whitebox.verdict == "violation"
    sigma = next(e for e in keyed.whitebox.estimates if e.name == "sigma")
    assert sigma.value == pytest.approx(0.8 * m.sigma, rel=0.03)


def test_keyed_aes_only_bug_is_caught_by_the_aes_audit(monkeypatch):
    pytest.importorskip("randomgen")
    _plant_keyed_sigma_bug(monkeypatch, only="aes")
    m = get_mechanism("gaussian", epsilon=2.0, delta=1e-5)
    assert audit(m, dim=8, samples=2000, noise="keyed", generator="philox", rng=6).verdict == (
        "consistent"
    )
    r = audit(m, dim=8, samples=2000, noise="keyed", generator="aes", rng=6)
    assert r.generator == "aes" and r.verdict == "violation"


def test_keyed_audit_draws_through_the_release_path_with_distinct_ids(monkeypatch):
    seen: list[list[str]] = []
    real = release_module.Release.protect

    def spy(self, X, ids=None, **kw):
        seen.append(list(ids))
        assert self.keyed
        return real(self, X, ids, **kw)

    monkeypatch.setattr(release_module.Release, "protect", spy)
    m = get_mechanism("laplace", epsilon=1.0)
    r = audit(m, dim=2, samples=300, noise="keyed", rng=0, whitebox_samples=300)
    ids = [i for batch in seen for i in batch]
    assert len(ids) == len(set(ids)) == 300 * 2 + 300  # both sides and the white box
    again = audit(m, dim=2, samples=300, noise="keyed", rng=0, whitebox_samples=300)
    assert again.epsilon_lower == r.epsilon_lower  # a seeded audit derives its key from rng


@pytest.mark.slow
def test_keyed_correct_mechanisms_read_consistent():
    for gen in ("philox", "aes"):
        if gen == "aes":
            pytest.importorskip("randomgen")
        r = audit(get_mechanism("laplace", epsilon=1.0), dim=4, samples=4000, noise="keyed",
                  generator=gen, rng=8)  # fmt: skip
        assert r.verdict == "consistent", (gen, r.reason)


@pytest.mark.slow
def test_cli_keyed_audits_both_generators_and_catches_the_keyed_bug(monkeypatch):
    pytest.importorskip("randomgen")
    _plant_keyed_sigma_bug(monkeypatch)
    args = ["audit", "-m", "gaussian", "--epsilon", "2", "--delta", "1e-5", "--dim", "8"]
    args += ["--samples", "2000", "--seed", "0", "--keyed", "--json"]
    r = runner.invoke(_app(), [*args, "--fail-on-violation"])
    assert r.exit_code == 3, r.output
    out = json.loads(r.stdout)
    assert out["verdict"] == "violation"
    assert [a["generator"] for a in out["audits"]] == ["philox", "aes"]
    assert all(a["noise"] == "keyed" and a["verdict"] == "violation" for a in out["audits"])
    r = runner.invoke(_app(), [*args, "--keyed-generator", "philox"])
    assert r.exit_code == 0 and json.loads(r.stdout)["verdict"] == "violation"


def test_generator_needs_keyed_noise():
    m = get_mechanism("laplace", epsilon=1.0)
    with pytest.raises(ValueError, match="generator"):
        audit(m, dim=2, samples=100, generator="aes")
    with pytest.raises(ValueError, match="generator"):
        audit(m, dim=2, samples=100, noise="keyed", generator="chacha")
    with pytest.raises(ValueError, match="resolution"):
        audit(m, dim=2, samples=100, resolution=1.0)


# ---- the white box recomputes what it checks ------------------------------------------------
def test_wrong_sensitivity_attribute_is_caught():
    m = get_mechanism("gaussian", epsilon=2.0, delta=1e-5)
    m.sensitivity = 1.0  # sigma stays calibrated to 2; the attribute (and the ledger's
    # noise multiplier sigma / sensitivity, twice too large) now lie
    r = audit(m, dim=8, samples=4000, rng=0)
    wb = r.whitebox
    assert wb.verdict == "violation" and r.verdict == "violation"
    bad = {c.name for c in wb.checks if not c.passed}
    assert "sensitivity" in bad and "noise multiplier of the guarantee" in bad
    # the pair is built from the relation (2 apart), not from the attribute
    assert r.distance == 2.0


def test_wrong_covariance_computation_is_caught(monkeypatch):
    # _setup skips the smoothing: Sigma, its covariance_diagonal and the noise all agree with
    # each other, but not with the parameters (smoothing=0.5 was asked for and claimed)
    monkeypatch.setattr(mahalanobis_module, "smooth_covariance", lambda s, lam: s)
    mask = [1.0, 0.0] * 4
    m = get_mechanism("mahalanobis", epsilon=1.0, mask=mask, smoothing=0.5)
    r = audit(m, dim=8, samples=4000, rng=0)
    wb = r.whitebox
    assert wb.verdict == "violation" and r.verdict == "violation"
    assert "covariance diagonal" in {c.name for c in wb.checks if not c.passed}


def test_wrong_covariance_attribute_alone_is_caught():
    m = get_mechanism("mahalanobis", epsilon=1.0, mask=[1.0, 0.0] * 4)
    m.covariance_diagonal = m.covariance_diagonal[::-1].copy()  # the noise is still right
    wb = whitebox_check(m, dim=8, samples=2000, rng=0)
    assert wb.verdict == "violation" and "covariance_diagonal" in wb.reason


def test_wrong_angle_table_is_caught_at_tiny_n(monkeypatch):
    monkeypatch.setattr(PurkayasthaMechanism, "angle_table", TableBugPurkayastha.angle_table)
    wb = whitebox_check(get_mechanism("purkayastha", epsilon=1.0), dim=3, samples=200, rng=0)
    assert wb.verdict == "violation" and "angle table" in wb.reason


def test_a_guarantee_stronger_than_the_parameters_is_caught():
    class Overclaims(GaussianMechanism):
        """Claims epsilon 1 at delta 1e-5 while sigma is calibrated to epsilon 2."""

        @property
        def guarantee(self):
            g = super().guarantee
            return type(g)(1.0, g.delta, neighbouring=g.neighbouring, relation=g.relation,
                           noise_multiplier=g.noise_multiplier)  # fmt: skip

    wb = whitebox_check(Overclaims(epsilon=2.0, delta=1e-5), dim=8, samples=4000, rng=0)
    assert wb.verdict == "violation"
    assert any("claim" in c.name and not c.passed for c in wb.checks)


def test_a_singular_sigma_is_refused_not_misread():
    # mask zeros with mask_delta=0: no noise along those axes; whitening by Sigma would divide
    # by zero (the audit used to report a Gamma shape of inf); refused with the reason
    m = get_mechanism("mahalanobis", epsilon=1.0, mask=[1, 0, 1, 0], mask_delta=0.0)
    with pytest.raises(ValueError, match="singular"):
        audit(m, dim=4, samples=200, rng=0)


def test_isotropy_test_variance_and_false_alarm_rate():
    from scipy import stats

    from privembed.audit._whitebox import isotropy_test, random_unit_rows
    from privembed.core.rng import as_generator

    # the variance it uses, 2(d-1)/(d^2(d+2)), is that of Beta(1/2, (d-1)/2) (scipy)
    for d in (2, 5, 384):
        want = stats.beta(0.5, (d - 1) / 2).var()
        assert 2 * (d - 1) / (d * d * (d + 2)) == pytest.approx(want, rel=1e-12)
    # uniform directions: Bonferroni p below 0.05 in at most 5% of 400 replicates (+4.4 SE)
    g = as_generator(0)
    p = [isotropy_test("iso", random_unit_rows(g, 300, 6), 1e-5).pvalue for _ in range(400)]
    assert np.mean(np.array(p) < 0.05) <= 0.05 + 4.4 * math.sqrt(0.05 * 0.95 / 400)
    # a direction with one coordinate's variance 1.2x the rest: rejected at 2e4 draws
    Z = g.standard_normal((20_000, 6)) * np.sqrt([1.2, 1, 1, 1, 1, 1])
    U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    assert not isotropy_test("iso", U, 1e-5).passed


def test_cli_resolution_default_is_the_librarys():
    import inspect

    from privembed._cli.audit import audit as cli_audit
    from privembed.audit import RESOLUTION

    assert inspect.signature(cli_audit).parameters["resolution"].default == RESOLUTION
