"""Issue 24, findings 3, 5, 6 and 9, each as the attack that found it.

3. A subject budget was charged to whatever subject the client named: fresh ``user`` values
   defeated it (paraphrase averaging), and one key could exhaust another tenant's subject.
5. ``serve --host 0.0.0.0`` bypassed the loopback-only rule for unauthenticated access.
6. Clean-vector aliases lived in memory only: after a restart, variants of a spent note were
   released again.
9. A repeated protected query must not average down.
"""

from __future__ import annotations

import hashlib

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.keys.ledger import Ledger
from privembed.server import config_from_dict, create_app, hash_api_key, running_server
from privembed.server.errors import ConfigError

from ._fake_upstream import FakeUpstream, clean_vector, fold_variants, serve_app
from .conftest import FULL_KEY, make_config, proxy

#: Laplace epsilon 2 per unit l2: pure 4-LDP per release on unit vectors
MODELS = {
    "docs": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 2.0}},
    "queries": {"role": "queries", "documents": "docs"},
    "queries-protected": {"role": "queries", "documents": "docs", "query": "protect"},
}
TENANT_A = "pe-tenant-a-gateway-key"
TENANT_B = "pe-tenant-b-gateway-key"
KEYS = [
    {"name": "plain", "sha256": hash_api_key(FULL_KEY)},
    {"name": "gw-a", "sha256": hash_api_key(TENANT_A), "may_assert_subjects": True},
    {"name": "gw-b", "sha256": hash_api_key(TENANT_B), "may_assert_subjects": True},
]


def _post(handle, body, key=FULL_KEY, headers=None) -> httpx.Response:
    h = {"Authorization": f"Bearer {key}", **(headers or {})}
    return httpx.post(handle.base_url + "/embeddings", json=body, headers=h, timeout=30)


def _paraphrases(n: int) -> list[str]:
    return [f"Jane Roe, born 1961, was admitted with pancreatitis (wording {i})" for i in range(n)]


# ---- 3. subjects belong to keys -------------------------------------------------------------


def test_a_key_may_not_name_its_subject_unless_its_config_says_so(server_key, tmp_path):
    """The attack of the issue: one key, 24 near-paraphrases, a fresh ``user`` per request,
    under a subject budget of 12 (three releases). Every request naming a subject is refused
    (403 ``subject_not_allowed``), and the same paraphrases without one are charged to the key:
    three pass, no more."""
    ledger = tmp_path / "ledger.sqlite"
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "subject_budget_epsilon": 12.0},
        models=MODELS,
        api_keys=KEYS[:1],
    ) as (handle, _, _):
        texts = _paraphrases(24)
        named = [_post(handle, {"model": "docs", "input": t, "user": f"u{i}"}) for i, t in
                 enumerate(texts)]  # fmt: skip
        assert {r.status_code for r in named} == {403}
        err = named[0].json()["error"]
        assert err["code"] == "subject_not_allowed" and err["param"] == "user"
        assert "may_assert_subjects" in err["message"]
        header = _post(handle, {"model": "docs", "input": texts[0]},
                       headers={"X-Privembed-Subject": "tenant-b"})  # fmt: skip
        assert header.status_code == 403
        assert header.json()["error"]["param"] == "X-Privembed-Subject"
        plain = [_post(handle, {"model": "docs", "input": t}).status_code for t in texts]
        assert plain.count(200) == 3 and plain[3:] == [403] * 21
    with Ledger(ledger, readonly=True) as led:
        assert led.spent_subject("key:plain").epsilon == pytest.approx(12.0)
        assert led.spent_subject("u1").releases == 0  # nothing charged to a client-named subject


def test_no_key_can_spend_another_keys_subjects(server_key, tmp_path):
    """Two gateways may name subjects; the same name under two keys is two subjects. Gateway A
    exhausting its "tenant-b" leaves gateway B's "tenant-b" (and B itself) untouched."""
    ledger = tmp_path / "ledger.sqlite"
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "subject_budget_epsilon": 8.0},
        models=MODELS,
        api_keys=KEYS,
    ) as (handle, _, _):
        texts = _paraphrases(6)
        a = [_post(handle, {"model": "docs", "input": t, "user": "tenant-b"}, TENANT_A)
             for t in texts[:4]]  # fmt: skip
        assert [r.status_code for r in a] == [200, 200, 403, 403]
        assert a[2].json()["error"]["code"] == "privacy_budget_exceeded"
        b = _post(handle, {"model": "docs", "input": texts[3], "user": "tenant-b"}, TENANT_B)
        assert b.status_code == 200
        # the header names the subject too, for a key allowed to
        h = _post(handle, {"model": "docs", "input": texts[4]}, TENANT_A,
                  headers={"X-Privembed-Subject": "tenant-c"})  # fmt: skip
        assert h.status_code == 200
        # without a subject the key itself is charged, apart from the subjects it names
        assert _post(handle, {"model": "docs", "input": texts[5]}, TENANT_A).status_code == 200
        # a text already released (same key, same text: the same vector) is free for anyone
        assert _post(handle, {"model": "docs", "input": texts[0], "user": "tenant-b"},
                     TENANT_B).status_code == 200  # fmt: skip
    with Ledger(ledger, readonly=True) as led:
        assert led.spent_subject("key:gw-a/tenant-b").epsilon == pytest.approx(8.0)
        assert led.spent_subject("key:gw-b/tenant-b").epsilon == pytest.approx(4.0)
        assert led.spent_subject("key:gw-a/tenant-c").epsilon == pytest.approx(4.0)
        assert led.spent_subject("key:gw-a").epsilon == pytest.approx(4.0)
        assert led.spent_subject("tenant-b").releases == 0


def test_subjects_written_before_namespacing_are_reported_at_start(server_key, tmp_path, caplog):
    """Subjects an earlier version recorded (client-named, or a key's bare name) are not merged
    into the namespaced ones; the server says so at start (a count, never the names)."""
    import logging

    from privembed import LaplaceMechanism
    from privembed.keys.ledger import record_key

    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as led:
        st = led.stage(LaplaceMechanism(epsilon=1.0), subject="alice-the-patient")
        st.add([record_key("x")])
        st.commit()
    with caplog.at_level(logging.INFO, logger="privembed.server"):
        with proxy(server_key[0], server={"ledger": str(ledger)}, models=MODELS,
                   api_keys=KEYS[:1]):  # fmt: skip
            pass
    warned = [r for r in caplog.records if r.getMessage() == "ledger_legacy_subjects"]
    assert len(warned) == 1 and warned[0].fields["subjects"] == 1
    assert "alice-the-patient" not in caplog.text


def test_subject_names_cannot_collide_across_keys():
    """``key:NAME/SUBJECT`` is unambiguous because key names may not contain '/'."""
    base = {"server": {"allow_unauthenticated": False}, "models": {"d": {"mechanism": "laplace",
            "params": {"epsilon": 1.0}}}}  # fmt: skip
    bad = {**base, "api_keys": [{"name": "gw/x", "sha256": hash_api_key("pe-k")}]}
    with pytest.raises(ConfigError, match=r"\[\[api_keys\]\] #1 name must not contain '/'"):
        config_from_dict(bad, key=bytes(32))
    anon = {**base, "api_keys": [{"name": "anonymous", "sha256": hash_api_key("pe-k")}]}
    cfg = config_from_dict(anon, key=bytes(32))  # a key may be called anonymous ...
    from privembed.server.app import subject_of

    named = cfg.api_keys[0]
    assert subject_of(named, None) == "key:anonymous"
    assert subject_of(None, None) == "unauthenticated"  # ... and is not the unauthenticated


# ---- 5. the loopback rule on the effective bind address ------------------------------------


def _unauthenticated_config(server_key) -> dict:
    raw = make_config("http://127.0.0.1:9", server_key[0], models=MODELS, api_keys=[])
    raw["server"]["allow_unauthenticated"] = True
    return raw


def test_serve_host_flag_cannot_bypass_the_loopback_rule(server_key, tmp_path, monkeypatch):
    """The issue: the rule was checked on the configured host before ``--host`` replaced it,
    and an unauthenticated POST from another interface got 200. Now the flag's address is
    checked before anything listens: exit 2, one line, nothing served."""
    import uvicorn

    from privembed.cli import app
    from privembed.server import runner

    started: list[str] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: started.append("run"))
    # uvicorn.Config applies the server's logging config, whose handlers write to the
    # sys.stderr of the moment: CliRunner's, closed after invoke, and every later test that
    # logs through uvicorn's loggers would write to a closed file (CI lost its stderr)
    monkeypatch.setattr(uvicorn.Config, "configure_logging", lambda self: None)
    monkeypatch.setattr(runner._Server, "clean", True)
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        f'[server]\nkey_file = "{server_key[0]}"\nallow_unauthenticated = true\n'
        '[models.docs]\nmechanism = "laplace"\nparams = { epsilon = 2.0 }\n'
    )
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        r = CliRunner().invoke(app, ["serve", "--config", str(cfg), "--host", host])
        assert r.exit_code == 2, r.output
        assert "allow_unauthenticated" in r.output and repr(host) in r.output
        assert len(r.output.strip().splitlines()) == 1
    assert started == []
    r = CliRunner().invoke(app, ["serve", "--config", str(cfg), "--host", "127.0.0.1"])
    assert r.exit_code == 0 and started == ["run"], r.output


def test_the_library_runner_checks_the_address_it_binds(server_key, tmp_path):
    app = create_app(config_from_dict(_unauthenticated_config(server_key)))
    with pytest.raises(ConfigError, match=r"host='0\.0\.0\.0'"):
        with running_server(app, host="0.0.0.0"):
            pass


def test_unauthenticated_requests_from_another_host_are_refused(server_key, tmp_path):
    """Defence in depth, whatever bound the socket: a request without a key is served only to
    a loopback client. Here a trusted local reverse proxy forwards a remote client."""
    with proxy(server_key[0], models=MODELS, api_keys=[],
               server={"allow_unauthenticated": True}) as (handle, _, _):  # fmt: skip
        body = {"model": "docs", "input": "hello"}
        local = httpx.post(handle.base_url + "/embeddings", json=body, timeout=30)
        assert local.status_code == 200
        remote = httpx.post(handle.base_url + "/embeddings", json=body, timeout=30,
                            headers={"X-Forwarded-For": "203.0.113.9"})  # fmt: skip
        assert remote.status_code == 401
        assert remote.json()["error"]["code"] == "missing_api_key"


# ---- 6. aliases survive a restart ------------------------------------------------------------


def test_variants_of_a_spent_note_stay_refused_after_a_restart(server_key, tmp_path):
    """The issue: accent or zero-width variants of a spent note (one clean vector) were released
    again after a restart, because the clean-vector aliases lived in memory. They are ledger
    state now (HMAC tags, never vectors or texts)."""
    ledger = tmp_path / "ledger.sqlite"
    settings = {"ledger": str(ledger), "budget_epsilon": 4.0}  # one release per identity
    note = "Jose Alvarez was admitted with acute pancreatitis"
    variants = [
        "José Álvarez was admitted with acute pancreatitis",
        "Jose\u200b Alvarez was admitted with acute pancreatitis",
        "Jos\u00e9 Alvarez was admitted with acute panc\u200breatitis",
    ]
    for v in variants:
        assert fold_variants(v) == fold_variants(note)  # one clean vector for all of them
    fake = FakeUpstream(fold=fold_variants)
    with serve_app(fake.app) as upstream:
        raw = make_config(upstream, server_key[0], server=settings, models=MODELS,
                          api_keys=KEYS[:1])  # fmt: skip
        with running_server(create_app(config_from_dict(raw))) as handle:
            assert _post(handle, {"model": "docs", "input": note}).status_code == 200
            assert _post(handle, {"model": "docs", "input": variants[0]}).status_code == 403
        # a restart: a new server process state on the same ledger and backend
        with running_server(create_app(config_from_dict(raw))) as handle:
            for v in variants:
                r = _post(handle, {"model": "docs", "input": v})
                assert r.status_code == 403, v
                assert r.json()["error"]["code"] == "privacy_budget_exceeded"
            assert _post(handle, {"model": "docs", "input": note}).status_code == 200  # free
    blob = ledger.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite-*"))
    vec = clean_vector(fold_variants(note)).astype("<f4").tobytes()
    assert vec not in blob and vec[:16] not in blob
    assert b"Alvarez" not in blob and "Álvarez".encode() not in blob
    assert hashlib.sha256(vec).hexdigest().encode() not in blob
    with Ledger(ledger, readonly=True) as led:
        (n_aliases,) = led._db.execute("SELECT COUNT(*) FROM aliases").fetchone()
    assert n_aliases == 1


# ---- 9. a repeated protected query -------------------------------------------------------------


def test_a_repeated_protected_query_gets_the_same_noise(server_key):
    """200 copies of one query through ``query = "protect"``: every copy is the same vector
    (keyed by key, text and configuration), so their average is no closer to the clean query
    than one copy."""
    with proxy(server_key[0], models=MODELS, api_keys=KEYS[:1]) as (handle, _, _):
        q = "which patients were admitted with pancreatitis?"
        got = []
        for _ in range(25):
            r = _post(handle, {"model": "queries-protected", "input": [q] * 8})
            got += [d["embedding"] for d in r.json()["data"]]
    Y = np.array(got)
    assert Y.shape[0] == 200 and np.all(Y == Y[0])
    clean = clean_vector(q).astype(np.float64)
    mean = Y.mean(axis=0)
    one = float(Y[0] @ clean / np.linalg.norm(Y[0]))
    assert float(mean @ clean / np.linalg.norm(mean)) == pytest.approx(one, abs=1e-6)
