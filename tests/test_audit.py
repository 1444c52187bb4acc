"""privembed.audit: empirical epsilon lower bounds and the white-box noise-law check.

Criteria used below (fixed seeds throughout):

* a *sampling violation* is an epsilon lower bound above the claim at 95% confidence (one-sided
  Clopper-Pearson bounds on both error rates, each at 97.5%);
* a *white-box violation* is a goodness-of-fit p-value below 1e-5 or a parameter interval at
  level 1 - 1e-5 (about 4.4 standard errors) whose end most favourable to the mechanism is
  beyond the claim;
* a correct mechanism must give neither, and a lower bound below its claim.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats
from typer.testing import CliRunner

from privembed.audit import (
    AngleLaw,
    audit,
    cp_upper,
    epsilon_lower_bound,
    max_certifiable_epsilon,
    mechanism_from_config,
    samples_needed,
    whitebox_check,
)
from privembed.audit._core import _draw
from privembed.audit._families import AUDITORS
from privembed.core.accounting import ApproxDP
from privembed.core.rng import as_generator
from privembed.mechanisms import (
    MECHANISMS,
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    get_mechanism,
)
from privembed.mechanisms.purkayastha import AngleTable, PurkayasthaMechanism

FAST = {"samples": 20_000, "whitebox_samples": 20_000}

#: fast configurations, one per registered mechanism (a new registry entry must add one here)
CONFIGS = {
    "gaussian": ({"epsilon": 2.0, "delta": 1e-5}, 8),
    # sigma 4 implies epsilon 2 at delta 1e-5 (sigma 0.5 would claim 17, above what 1e4 test
    # draws can certify: inconclusive, tests/test_audit_verdicts.py)
    "empirical": ({"sigma": 4.0}, 8),
    "laplace": ({"epsilon": 1.0}, 8),
    "mahalanobis": ({"epsilon": 1.0, "mask": [1, 0, 0, 1, 0, 0, 1, 1]}, 8),
    "purkayastha": ({"epsilon": 1.0}, 8),
    "projection": ({"k": 4, "epsilon": 2.0, "delta": 1e-5, "input_dim": 8}, 8),
    "subspace": (
        {
            "basis": np.linalg.qr(np.random.default_rng(7).standard_normal((8, 4)))[0].T,
            "epsilon": 1.0,
        },
        8,
    ),
}


# ---- planted bugs (the list) ----------------------------------------------------------
class GammaShapeMinusOne(LaplaceMechanism):
    """Laplace radius drawn with Gamma shape d - 1 instead of d."""

    def _perturb(self, X, source):
        n, d = X.shape
        u = source.normal(n, d)
        r = source.gamma(float(d - 1), n) / self.epsilon
        u *= (r / np.linalg.norm(u, axis=1))[:, None]
        return X + u


class TraceOneMahalanobis(MahalanobisMechanism):
    """Samples with Sigma normalised to trace 1 while claiming trace d."""

    def _perturb(self, X, source):
        Y = super()._perturb(X, source)
        return X + (Y - X) / math.sqrt(X.shape[1])


class HalfSigmaGaussian(GaussianMechanism):
    """Draws noise with half the calibrated sigma."""

    def _perturb(self, X, source):
        noise = source.normal(*X.shape)
        noise *= self.sigma / 2.0
        return X + noise


class ClassicAsClaimed(GaussianMechanism):
    """The classic sigma presented as the requested (epsilon, delta) (the true delta is hidden)."""

    @property
    def guarantee(self):
        return ApproxDP(self.epsilon, self.delta, neighbouring="any two unit vectors")


# ---- bounds -----------------------------------------------------------------------------------
def test_cp_upper_is_the_exact_clopper_pearson_bound():
    for k, n in ((0, 50), (3, 1000), (500, 1000), (1000, 1000)):
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact").high
        assert float(cp_upper(k, n, 0.025)) == pytest.approx(ref, rel=1e-9)


def test_cp_upper_large_counts_and_poisson_limit_agree_with_the_beta_inverse():
    # Wilson above 1e6 counts, Poisson above 1e12 trials: within 1e-4 relative of the exact one
    assert float(cp_upper(2e6, 1e7, 0.025)) == pytest.approx(0.2002481, rel=1e-4)
    assert float(cp_upper(5, 1e13, 0.025)) == pytest.approx(
        float(stats.gamma.ppf(0.975, 6)) / 1e13, rel=1e-9
    )


def test_epsilon_lower_bound_formula_and_ceiling():
    a, b = float(cp_upper(10, 10_000, 0.025)), float(cp_upper(5000, 10_000, 0.025))
    assert epsilon_lower_bound(10, 10_000, 5000, 10_000) == pytest.approx(math.log((1 - b) / a))
    # the ln N ceiling: ln(n / ln(2 / alpha)) to within 1e-3 at these n
    for n in (10**4, 5 * 10**5, 10**8):
        assert max_certifiable_epsilon(n) == pytest.approx(math.log(n / math.log(40)), abs=2e-3)
    assert max_certifiable_epsilon(10**6) > max_certifiable_epsilon(10**5)
    with pytest.raises(ValueError, match="confidence"):
        epsilon_lower_bound(0, 10, 0, 10, confidence=1.5)


# ---- every registered mechanism, correct: consistent, bound below the claim ---------------------
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_registered_mechanism_audits_below_its_claim(name):
    assert name in CONFIGS, f"add a fast audit configuration for the new mechanism {name!r}"
    params, d = CONFIGS[name]
    r = audit(get_mechanism(name, **params), dim=d, rng=11, **FAST)
    assert r.epsilon_lower < r.claimed_epsilon, r
    assert r.whitebox is not None and r.whitebox.verdict == "consistent", r.whitebox
    assert r.verdict == "consistent"
    assert all(t.passed for t in r.whitebox.tests)
    assert r.epsilon_lower <= r.ceiling
    json.dumps(r.to_dict())  # JSON-safe


def test_projection_attribute_relation_and_purkayastha_small_dim():
    m = get_mechanism("projection", k=4, epsilon=1.0, delta=1e-5, neighbouring="attribute")
    r = audit(m, dim=8, rng=3, **FAST)
    assert "attribute" in r.pair and r.verdict == "consistent"
    assert r.whitebox.estimates[1].value == pytest.approx(m.projection.max_column_norm(8))
    r = audit(get_mechanism("purkayastha", epsilon=2.0), dim=2, rng=3, **FAST)
    assert r.verdict == "consistent" and r.epsilon_lower > 0.5 * r.claimed_epsilon


def test_an_audit_is_tight_where_the_loss_is_often_near_its_worst():
    # d = 2, eps = 4 per unit, antipodal: the pair's claim is 8 nats; at N = 2e4 the bound
    # reaches at least half of it (the exact-law expectation is 5.35 nats, i.e. 0.67 per unit)
    r = audit(get_mechanism("laplace", epsilon=4.0), dim=2, rng=5, whitebox=False, samples=20_000)
    assert 0.5 * r.claimed_epsilon < r.epsilon_lower < r.claimed_epsilon


# ---- the planted bugs are caught ------------------------------------------------------------
def test_laplace_gamma_shape_d_minus_1_caught_at_small_d():
    r = audit(GammaShapeMinusOne(epsilon=1.0), dim=2, rng=1, **FAST)
    assert r.sampling_violation, r  # lower bound above the claim (1 per unit)
    wb = r.whitebox
    assert wb.verdict == "violation" and wb.epsilon_low == math.inf
    shape = wb.estimates[1]
    assert shape.high < 2 and shape.value == pytest.approx(1.0, abs=0.1)


def test_laplace_gamma_shape_d_minus_1_at_d_384_only_the_whitebox_sees_it():
    m = GammaShapeMinusOne(epsilon=1.0)
    r = audit(m, dim=384, rng=1, samples=2000, whitebox_samples=20_000)
    assert not r.sampling_violation  # the sampler almost never visits the singularity
    assert r.whitebox.verdict == "violation"  # radius scale d/(d-1) off: 0.26% at 5e-4 SE


def test_mahalanobis_trace_one_covariance_caught():
    mask = [1, 0] * 8
    r = audit(TraceOneMahalanobis(epsilon=1.0, mask=mask), dim=16, rng=2, **FAST)
    assert r.sampling_violation, r
    wb = r.whitebox
    assert wb.verdict == "violation"
    # whitened by the claimed Sigma the noise is l2 Laplace at eps * sqrt(d) = 4
    assert wb.estimates[0].value == pytest.approx(4.0, rel=0.02)
    trace = next(e for e in wb.estimates if e.name.startswith("trace"))
    assert trace.value == pytest.approx(1.0, rel=0.05)


def test_gaussian_sigma_halved_caught_by_the_whitebox():
    r = audit(HalfSigmaGaussian(epsilon=1.0, delta=1e-5), dim=16, rng=3, **FAST)
    wb = r.whitebox
    assert wb.verdict == "violation" and r.verdict == "violation"
    sigma = wb.estimates[0]
    assert sigma.value == pytest.approx(sigma.claimed / 2, rel=0.01)
    assert wb.delta_at_claim > 1e-3 and wb.epsilon_low > 2.0


def test_classic_calibration_presented_as_50_1e5_ldp_caught_by_the_whitebox():
    m = ClassicAsClaimed(epsilon=50.0, delta=1e-5, calibration="classic")
    r = audit(m, dim=16, rng=4, **FAST)
    # sampling cannot reach 50 (ceiling ~ ln N): no sampling violation, but white-box delta 0.586
    assert r.ceiling < 50 and not r.sampling_violation
    wb = r.whitebox
    assert wb.verdict == "violation"
    est = next(e for e in wb.estimates if e.name.startswith("delta"))
    assert est.value == pytest.approx(0.586, abs=0.015)
    assert 0.5 < wb.delta_at_claim < 0.6
    # the shipped mechanism reports that delta itself, so its white box is consistent; the
    # audit as a whole is inconclusive: 50 is above what 1e4 test draws can certify
    honest = get_mechanism("gaussian", epsilon=50.0, delta=1e-5, calibration="classic")
    r = audit(honest, dim=16, rng=4, **FAST)
    assert r.whitebox.verdict == "consistent" and r.verdict == "inconclusive"


class _OldAngleTable(AngleTable):
    """The angle table as shipped before the audit: it stopped 60 nats below the mode."""

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(epsilon, d)
        c = self.core_cells
        self.edges, self.slope, self.widths = self.edges[: c + 1], self.slope[:c], self.widths[:c]
        self.cdf = self.cdf[: c + 1] / self.cdf[c]


class _TruncatedPurkayastha(PurkayasthaMechanism):
    def angle_table(self, d: int) -> AngleTable:
        return _OldAngleTable(self.epsilon, d)


def test_purkayastha_table_reaches_pi_and_a_truncated_table_is_caught():
    # found by this audit in the shipped sampler: the angle table dropped the mass more than 60
    # nats below the mode, so for antipodal inputs x1 produced, with probability delta, outputs
    # x0 never did (eps = 20, d = 2: delta 0.94; the pure claim is 62.8 nats, beyond any
    # sampling audit). The table now reaches pi; the old one is planted here and caught.
    fam = AUDITORS["purkayastha"]
    fixed = get_mechanism("purkayastha", epsilon=20.0)
    assert fam.truncation_delta(fixed, 2) < 1e-10
    assert whitebox_check(fixed, dim=2, samples=5000, rng=0).verdict == "consistent"
    bad = _TruncatedPurkayastha(epsilon=20.0)
    assert fam.truncation_delta(bad, 2) == pytest.approx(0.941, abs=0.005)
    wb = whitebox_check(bad, dim=2, samples=5000, rng=0)
    assert wb.verdict == "violation" and "delta=0.941" in wb.reason
    assert fam.truncation_delta(get_mechanism("purkayastha", epsilon=4.0), 16) < 1e-20


def test_fresh_noise_path_is_selectable():
    # the production path (rng=None inside privatize) is not reproducible: only the wiring is
    # checked here, nothing statistical
    r = audit(get_mechanism("laplace", epsilon=1.0), dim=4, samples=200, noise="fresh", rng=0)
    assert r.noise == "fresh" and r.samples == 200 and r.whitebox is not None
    with pytest.raises(ValueError, match="noise"):
        audit(get_mechanism("laplace", epsilon=1.0), dim=4, samples=200, noise="replayed")


def test_classifier_score_also_catches_the_singular_radius():
    r = audit(
        GammaShapeMinusOne(epsilon=1.0),
        dim=2,
        rng=6,
        score="logistic",
        whitebox=False,
        samples=20_000,
    )
    assert r.score == "logistic" and r.sampling_violation


# ---- white-box details, power and the law computations ------------------------------------------
def test_whitebox_check_alone_and_unknown_family():
    wb = whitebox_check(get_mechanism("purkayastha", epsilon=3.0), dim=3, samples=20_000, rng=0)
    assert wb.verdict == "consistent" and wb.estimates[0].low <= 3.0 <= wb.estimates[0].high

    class Renamed(LaplaceMechanism):
        name = "renamed_laplace"

    m = Renamed(epsilon=1.0)
    with pytest.raises(ValueError, match="no white-box check"):
        whitebox_check(m, dim=4, samples=100, rng=0)
    with pytest.raises(ValueError, match="likelihood-ratio"):
        audit(m, dim=4, samples=100, rng=0)


def test_angle_law_cdf_matches_quadrature():
    for eps, d in ((2.0, 2), (5.0, 3), (1.0, 50)):
        law = AngleLaw(eps, d)

        def f(t, eps=eps, d=d):
            return math.exp(-eps * t) * math.sin(t) ** (d - 2)

        z = integrate.quad(f, 0, math.pi, limit=200)[0]
        for t in (0.3, 1.0, 2.0):
            ref = integrate.quad(f, 0, t, limit=200)[0] / z
            assert float(law.cdf(np.array([t]))[0]) == pytest.approx(ref, abs=1e-6)


def test_score_law_tails_match_sampled_scores():
    # the exact (discretised) law of the Laplace score vs 200k draws: binomial 4.4 SE
    m = get_mechanism("laplace", epsilon=1.0, renormalize=False)
    fam = AUDITORS["laplace"]
    pair = fam.pair(m, 8, None, as_generator(0))
    law = fam.score_law(m, pair, 8)
    n = 200_000
    g = as_generator(9)
    for side, x in ((law._side0, pair.x0), (law._side1, pair.x1)):
        s = _draw(m, x, n, g, lambda Y: fam.statistic(m, pair, Y))
        for t in np.quantile(s, [0.01, 0.3, 0.9, 0.999]):
            v, ge, _, _ = side
            p = math.exp(ge[np.searchsorted(v, t)])
            emp = float(np.mean(s >= t))
            assert abs(emp - p) <= 4.4 * math.sqrt(p * (1 - p) / n) + 2e-4, (t, emp, p)


def test_exact_law_epsilon_matches_the_claims_it_should():
    # the raw Gaussian score law gives back the analytic calibration (Balle & Wang) at delta;
    # Purkayastha's antipodal pair is pi * eps; the grid's discretisation error is below 2%
    cases = [
        ("gaussian", {"epsilon": 2.0, "delta": 1e-5, "renormalize": False}, 8, 2.0, 1e-3),
        ("purkayastha", {"epsilon": 1.0}, 2, math.pi, 0.02),
        ("laplace", {"epsilon": 1.0, "renormalize": False}, 8, 2.0, 0.02),
    ]
    for name, params, d, want, rel in cases:
        m = get_mechanism(name, **params)
        fam = AUDITORS[name]
        law = fam.score_law(m, fam.pair(m, d, None, as_generator(0)), d)
        assert law.exact_epsilon(delta=fam.claim(m).delta) == pytest.approx(want, rel=rel)
    # renormalised Gaussian noise at d = 2 releases a direction only: for the antipodal pair it
    # is about 0.34-DP at delta 1e-5 although calibrated (and claimed) at 1
    m = get_mechanism("gaussian", epsilon=1.0, delta=1e-5)
    fam = AUDITORS["gaussian"]
    law = fam.score_law(m, fam.pair(m, 2, None, as_generator(0)), 2)
    assert 0.3 < law.exact_epsilon(delta=1e-5) < 0.4
    r = audit(m, dim=2, samples=2000, rng=0, whitebox=False, power=True)
    assert r.samples_needed == math.inf and r.epsilon_exact < 0.5


def test_samples_needed_small_at_d2_astronomical_at_d384():
    n2, exact = samples_needed(get_mechanism("purkayastha", epsilon=1.0), dim=2)
    assert exact and 100 < n2 < 1e5
    n384, _ = samples_needed(get_mechanism("laplace", epsilon=1.0), dim=384)
    assert n384 > 1e12


# ---- configurations from files --------------------------------------------------------------
def _diag_covariance(d=24):
    """A diagonal Sigma given as a (d, d) matrix: configurations record it by its digest."""
    return np.diag(np.linspace(0.5, 2.0, d))


def test_mechanism_from_config_round_trip_and_errors(tmp_path):
    m = get_mechanism("projection", k=4, epsilon=1.0, delta=1e-6)
    assert mechanism_from_config(m.config).fingerprint == m.fingerprint
    small = get_mechanism("mahalanobis", epsilon=2.0, mask=[1.0, 0.0, 1.0, 0.0])
    assert mechanism_from_config(small.config).fingerprint == small.fingerprint
    cov = _diag_covariance()
    big = get_mechanism("mahalanobis", epsilon=2.0, covariance=cov)
    with pytest.raises(ValueError, match="covariance"):
        mechanism_from_config(big.config)
    np.save(tmp_path / "cov.npy", cov)
    rebuilt = mechanism_from_config(big.config, covariance=str(tmp_path / "cov.npy"))
    assert rebuilt.fingerprint == big.fingerprint
    np.save(tmp_path / "other.npy", 2 * cov[::-1, ::-1])
    with pytest.raises(ValueError):
        mechanism_from_config(big.config, covariance=str(tmp_path / "other.npy"))
    with pytest.raises(ValueError, match="has no mask"):
        mechanism_from_config(m.config, mask=[1.0])


# ---- command line ---------------------------------------------------------------------------
def _app():
    from privembed.cli import app

    return app


runner = CliRunner()


def _one_line_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert pattern in err, err


def test_cli_audit_text_and_json():
    app = _app()
    args = [
        "audit",
        "-m",
        "laplace",
        "--epsilon",
        "1",
        "--dim",
        "2",
        "--samples",
        "5000",
        "--seed",
        "0",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "audited epsilon" in r.output and "verdict" in r.output and "consistent" in r.output
    r = runner.invoke(app, [*args, "--json", "--no-whitebox", "--power"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["samples"] == 5000 and out["whitebox"] is None
    assert out["epsilon_lower"] < out["claimed_epsilon"] == 1.0 and out["samples_needed"] > 0
    # without the white box only sampling power decides: a correct mechanism's expected bound
    # reaches 0.8 of the claim at about 7.9e3 draws per side (exact law), not at 5000
    assert out["verdict"] == "inconclusive" and 5000 < out["needed_samples"] < 1e5
    args[args.index("5000")] = "20000"
    r = runner.invoke(app, [*args, "--json", "--no-whitebox"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["verdict"] == "consistent" and "expected bound" in out["reason"]


def test_cli_audit_from_a_protected_file(tmp_path):
    from privembed.data.io import write_embeddings

    app = _app()
    m = get_mechanism("gaussian", epsilon=3.0, delta=1e-6)
    X = as_generator(0).standard_normal((5, 12))
    path = tmp_path / "p.parquet"
    meta = {"protected": True, "mechanism": m.config, "guarantee": m.guarantee.to_dict()}
    write_embeddings(path, m.privatize(X, rng=0), ids=[str(i) for i in range(5)], metadata=meta)
    r = runner.invoke(
        app, ["audit", "--from-file", str(path), "--samples", "4000", "--seed", "1", "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dim"] == 12 and out["mechanism"] == m.config and out["claimed_epsilon"] == 3.0

    cov = _diag_covariance()
    big = get_mechanism("mahalanobis", epsilon=2.0, covariance=cov)
    path2 = tmp_path / "m.parquet"
    X2 = as_generator(1).standard_normal((3, 24))
    write_embeddings(
        path2, X2, ids=["a", "b", "c"], metadata={"protected": True, "mechanism": big.config}
    )
    r = runner.invoke(app, ["audit", "--from-file", str(path2), "--samples", "200"])
    _one_line_error(r, "cannot rebuild the mechanism recorded in")
    np.save(tmp_path / "cov.npy", cov)
    args = ["audit", "--from-file", str(path2), "--covariance", str(tmp_path / "cov.npy")]
    r = runner.invoke(app, [*args, "--samples", "2000", "--seed", "0", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dim"] == 24 and out["verdict"] == "consistent"


def test_cli_audit_user_errors(tmp_path):
    app = _app()
    _one_line_error(runner.invoke(app, ["audit", "--epsilon", "1"]), "--from-file")
    _one_line_error(runner.invoke(app, ["audit", "-m", "gaussian", "--epsilon", "1"]), "delta")
    _one_line_error(
        runner.invoke(app, ["audit", "-m", "laplace", "--epsilon", "1", "--score", "svm"]), "score"
    )
    _one_line_error(
        runner.invoke(app, ["audit", "-m", "laplace", "--epsilon", "1", "--samples", "5"]),
        "samples",
    )
    _one_line_error(
        runner.invoke(app, ["audit", "--from-file", str(tmp_path / "x.parquet"), "-m", "laplace"]),
        "--from-file",
    )
    _one_line_error(
        runner.invoke(app, ["audit", "--from-file", str(tmp_path / "missing.parquet")]), "missing"
    )
    lap = ["audit", "-m", "laplace", "--epsilon", "1", "--samples", "100"]
    _one_line_error(runner.invoke(app, [*lap, "--keyed-generator", "aes"]), "--keyed")
    _one_line_error(runner.invoke(app, [*lap, "--keyed", "--fresh-noise"]), "--fresh-noise")
    _one_line_error(runner.invoke(app, [*lap, "--resolution", "1"]), "resolution=1")


def test_cli_fail_on_violation_exit_status(monkeypatch):
    # a planted bug in place of the Laplace mechanism (the command line builds it by name)
    monkeypatch.setitem(MECHANISMS, "laplace", GammaShapeMinusOne)
    args = ["audit", "-m", "laplace", "--epsilon", "1", "--dim", "2", "--samples", "4000"]
    r = runner.invoke(_app(), [*args, "--seed", "0", "--fail-on-violation"])
    assert r.exit_code == 3, r.output
    assert "VIOLATION" in r.stderr and "violation" in r.stdout
    r = runner.invoke(_app(), [*args, "--seed", "0"])
    assert r.exit_code == 0
