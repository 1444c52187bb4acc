"""Advice per deployment mode: the recommended setting is reproduced by the search it
recommends, rows are labelled truly, and the output reads at 80 columns."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privembed.evaluation.modes import advise_modes
from privembed.evaluation.threats import DOES_NOT_DEFEND, NOT_MEASURED
from privembed.mechanisms import build_mechanism

KEY = bytes(range(32))


def _corpus(n: int = 500, d: int = 48, clusters: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((clusters, d))
    lab = rng.integers(0, clusters, n + 60)
    Z = C[lab] + 0.6 * rng.standard_normal((n + 60, d))
    return Z[:n], Z[n:]  # documents and held-out queries of the same clusters


def _clean_top(Q, X, k=10):
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    return np.argsort(-(Qn @ Xn.T), axis=1)[:, :k]


def test_the_recommendation_is_reproduced_by_the_search_it_recommends(tmp_path):
    from privembed.integrations.collection import ProtectedCollection

    X, Q = _corpus()
    adv = advise_modes(X, queries=Q, modes=("plain", "rerank"), mechanisms=("laplace",),
                       min_recall=0.9, max_depth=80, seed=0)  # fmt: skip
    r = adv.recommended
    assert r is not None and r.mode == "rerank" and r.epsilon is not None, adv.sentence()
    plain = next(s for s in adv.settings if s.mode == "plain")
    # re-ranking is what makes a small epsilon useful
    assert plain.epsilon is None or plain.epsilon > 2 * r.epsilon
    mech = build_mechanism(r.mechanism, epsilon=r.epsilon)
    ids = [f"r{i}" for i in range(len(X))]
    with ProtectedCollection.open("faiss", tmp_path, "col", mechanism=mech, key=KEY,
                                  payloads=True) as col:  # fmt: skip
        col.add(ids, X)  # keyed noise: a fresh draw, not the one advise measured
        hits = col.query(Q, k=10, rerank=r.depth)
    top = _clean_top(Q, X)
    got = np.mean([
        len({f"r{j}" for j in top[i]} & {h.id for h in hs}) / 10 for i, hs in enumerate(hits)
    ])  # fmt: skip
    assert got >= adv.floor, (got, r.depth, r.epsilon)
    assert r.decryptions_per_query == r.depth and r.payload_bytes_per_query > 0


def test_the_subspace_recommendation_is_reproduced_by_its_search(tmp_path):
    from privembed.integrations.collection import ProtectedCollection
    from privembed.mechanisms.subspace import SubspaceBasis, SubspaceMechanism

    X, Q = _corpus(d=64, clusters=8)
    public, _ = _corpus(n=400, d=64, clusters=8)  # the same kind of data, other records
    basis = SubspaceBasis.from_embeddings(public)
    adv = advise_modes(X, queries=Q, modes=("subspace+rerank",), mechanisms=("laplace",),
                       basis=basis, min_recall=0.9, max_depth=80, seed=0)  # fmt: skip
    r = adv.recommended
    assert r is not None and r.subspace_k is not None, adv.sentence()
    mech = SubspaceMechanism(basis=basis, epsilon=r.epsilon, k=r.subspace_k)
    with ProtectedCollection.open("faiss", tmp_path, "col", mechanism=mech, key=KEY,
                                  payloads=True) as col:  # fmt: skip
        col.add([f"r{i}" for i in range(len(X))], X)
        hits = col.query(Q, k=10, rerank=r.depth)
    top = _clean_top(Q, X)
    got = np.mean([
        len({f"r{j}" for j in top[i]} & {h.id for h in hs}) / 10 for i, hs in enumerate(hits)
    ])  # fmt: skip
    assert got >= adv.floor, (got, r.depth, r.epsilon, r.subspace_k)
    # the basis holder is a threat of this mode, and the reid it gets is measured
    assert "basis_holder" in [v.threat.name for v in r.verdicts]


def test_threats_at_the_recommended_setting_are_named_plainly():
    X, Q = _corpus()
    adv = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",), seed=0)
    r = adv.recommended
    assert r is not None
    v = {x.threat.name: x for x in r.verdicts}
    assert v["candidate_holder"].verdict == DOES_NOT_DEFEND
    assert v["store_only"].verdict == NOT_MEASURED  # never "defends" without an attack
    assert not any(x.defends for x in r.verdicts if x.threat.defended_by == "epsilon")
    text = "\n".join(adv.lines())
    assert f"measured reid@1 = {r.reid():.3f}" in text
    assert "no setting that keeps search useful prevents re-identification" in text


def test_pseudo_queries_are_said():
    X, _ = _corpus(n=200)
    adv = advise_modes(X, modes=("rerank",), mechanisms=("laplace",), n_queries=50, seed=0)
    assert adv.queries == "pseudo-queries" and "pseudo-queries" in adv.lines()[0]


def test_none_meets_only_after_every_mode_with_nearest_points():
    X, Q = _corpus(n=200)
    adv = advise_modes(X, queries=Q, mechanisms=("laplace",), min_recall=1.0, max_depth=10,
                       grid=(1.0, 10.0), max_sync_bytes=10_000, seed=0)  # fmt: skip
    assert adv.recommended is None
    modes = {s.mode for s in adv.settings}
    assert modes == {"sealed", "plain", "rerank", "subspace+rerank", "query"}
    assert adv.sentence().startswith("No setting meets")
    for s in adv.settings:
        assert not s.meets_floor and s.epsilon is None
        line = adv.setting_line(s)
        assert "smallest meeting" not in line  # a row's label is true
        if s.mode == "sealed":  # 200 payloads fetched once: over a sync budget of 10 kB
            assert "over the budget" in line and "over the budget" in s.notes[0]
        else:
            assert "nearest" in line or "not available" in line


def test_rows_meeting_the_floor_say_so_and_those_missing_it_do_not():
    X, Q = _corpus(n=300)
    adv = advise_modes(X, queries=Q, modes=("plain", "rerank"), mechanisms=("laplace",),
                       max_depth=40, seed=0)  # fmt: skip
    for s in adv.settings:
        line = adv.setting_line(s)
        assert ("smallest meeting the floor" in line) == s.meets_floor
        if s.meets_floor:
            assert s.utility_low >= adv.floor


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"modes": ("plain", "remote")}, "mode='remote'"),
        ({"mechanisms": ("mahalanobis",)}, "'mahalanobis'"),
        ({"min_recall": 1.5}, "min_recall"),
        ({"max_depth": 3}, "max_depth"),
    ],
)
def test_bad_arguments_name_the_parameter(kw, match):
    X, _ = _corpus(n=60)
    with pytest.raises(ValueError, match=re.escape(match)):
        advise_modes(X, **kw)


def _app():
    from privembed._cli.advise import register

    app = typer.Typer()
    register(app)
    app.command(name="noop")(lambda: None)
    return app


def test_advise_command_at_80_columns_splits_no_word(tmp_path):
    from privembed.data.io import write_embeddings

    X, _ = _corpus(n=300)
    write_embeddings(tmp_path / "e.npz", X.astype(np.float32))
    args = ["advise", str(tmp_path / "e.npz"), "--mechanisms", "laplace", "--max-depth", "40"]
    r = CliRunner().invoke(_app(), args, env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    adv = advise_modes(X, mechanisms=("laplace",), max_depth=40, seed=0)
    whole = " ".join(adv.lines()).split()
    assert out.split() == whole  # every word printed whole, none cut at the margin
    j = CliRunner().invoke(_app(), [*args, "--json"])
    assert j.exit_code == 0, j.output
    got = json.loads(j.stdout)
    assert got["answer"] == adv.sentence() and got["queries"] == "pseudo-queries"


def test_advise_command_refuses_plain_only_options_without_plain_only(tmp_path):
    from privembed.data.io import write_embeddings

    X, _ = _corpus(n=60)
    write_embeddings(tmp_path / "e.npz", X.astype(np.float32))
    r = CliRunner().invoke(_app(), ["advise", str(tmp_path / "e.npz"), "--target", "ndcg@10>=0.4"])
    assert r.exit_code == 2 and "--target applies to --plain-only" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


class _Probe:
    """A token-attack stand-in: its score is the mean cosine of the release to the originals
    (1 on clean vectors), against a blind value of ``blind``."""

    name = "token_inference"

    def __init__(self, blind: float) -> None:
        self.blind = blind
        self.calls: list[str] = []

    def check(self, release):
        from privembed.evaluation import StrengthCheck

        self.calls.append(release.mechanism.name)
        Y = release.Y / np.linalg.norm(release.Y, axis=1, keepdims=True)
        ref = release.reference()
        ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
        v = float(np.mean(np.einsum("ij,ij->i", Y, ref)))
        return {"leakage": v}, StrengthCheck(
            "token_inference", "leakage", v, self.blind, v - self.blind - 0.01,
            v - self.blind + 0.01,
        )  # fmt: skip


def test_more_attacks_run_at_the_recommended_setting_only_and_join_the_verdicts():
    X, Q = _corpus()
    strong = _Probe(blind=0.0)  # beats blind on clean (1.0 vs 0.0)
    adv = advise_modes(X, queries=Q, modes=("plain", "rerank"), mechanisms=("laplace",),
                       attacks=[strong], seed=0)  # fmt: skip
    r = adv.recommended
    assert r is not None and strong.calls == ["none", "laplace"]  # clean check, then the setting
    v = {x.threat.name: x for x in r.verdicts}
    assert v["auxiliary_text"].verdict == DOES_NOT_DEFEND  # cosine ~0.4 >> 0 + margin
    assert v["auxiliary_text"].evidence.attack == "token_inference"
    assert not any(s.evidence and s is not r and len(s.evidence) > 1 for s in adv.settings)
    weak = _Probe(blind=2.0)  # loses to its blind baseline even on clean vectors
    adv = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",),
                       attacks=[weak], seed=0)  # fmt: skip
    v = {x.threat.name: x for x in adv.recommended.verdicts}
    assert v["auxiliary_text"].verdict.startswith("no evidence")
    assert "No token inference attack was run" not in "\n".join(adv.lines())


def test_advise_command_with_real_queries_and_a_public_basis(tmp_path):
    from privembed.data.io import write_embeddings

    X, Q = _corpus(d=64, clusters=8)
    public, _ = _corpus(n=400, d=64, clusters=8)
    for name, A in (("d.npz", X), ("q.npz", Q), ("pub.npz", public)):
        write_embeddings(tmp_path / name, A.astype(np.float32))
    r = CliRunner().invoke(
        _app(), ["advise", str(tmp_path / "d.npz"), "--queries", str(tmp_path / "q.npz"),
                 "--basis", str(tmp_path / "pub.npz"), "--mechanisms", "laplace",
                 "--modes", "rerank,subspace+rerank", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["queries"] == "queries"
    sub = next(s for s in out["settings"] if s["mode"] == "subspace+rerank")
    assert sub["meets_floor"] and sub["subspace_k"] >= 2
    # a public basis costs no privacy: the guarantee is the noise's alone (2 epsilon-LDP)
    assert sub["ldp_epsilon"] == pytest.approx(2 * sub["epsilon"])
    bad = CliRunner().invoke(_app(), ["advise", str(tmp_path / "d.npz"), "--modes", "remote"])
    assert bad.exit_code == 2 and "mode='remote'" in bad.stderr and bad.stdout == ""


def test_a_setting_at_the_bottom_of_the_grid_is_not_called_the_smallest():
    X, Q = _corpus(n=300)
    adv = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",),
                       grid=(1e4, 1e5), seed=0)  # fmt: skip
    (s,) = adv.settings
    assert s.meets_floor and s.at_grid_bottom
    assert "smallest meeting" not in adv.setting_line(s)
    assert "a smaller one may too" in adv.setting_line(s)


def test_a_cap_on_the_ldp_epsilon_is_respected():
    X, Q = _corpus(n=300)
    adv = advise_modes(X, queries=Q, modes=("rerank",), mechanisms=("laplace",),
                       max_ldp_epsilon=1.0, seed=0)  # fmt: skip
    assert adv.settings[0].meets_floor and adv.recommended is None
    assert "per-record LDP epsilon <= 1" in adv.sentence()
