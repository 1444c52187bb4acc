"""The security claims of docs/server.md, each through a running server (issue 31: the record
ids, one noise key per backend, keys in logs, the AES generator, the budget settings and the
clean-vector identity were stated without a test, or tested through a private method)."""

from __future__ import annotations

import hashlib
import logging
import sqlite3

import httpx
import numpy as np
import pytest

from privembed.keys.keyed import canonical_text, load_key, text_digests
from privembed.keys.ledger import BudgetRaise, Ledger
from privembed.release import Release
from privembed.server import config_from_dict, create_app, running_server, text_record_id
from privembed.server.logs import JsonFormatter
from privembed.server.service import backend_key

from ._fake_upstream import FakeUpstream, clean_vector, fold_variants, serve_app
from .conftest import API_KEYS, FULL_KEY, make_config, proxy

AUTH = {"Authorization": f"Bearer {FULL_KEY}"}
#: Laplace epsilon 2 per unit l2: pure 4-LDP per release on unit vectors
MODELS = {
    "docs": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 2.0}},
    "wide": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 2.5}},  # 5-LDP
}


def _post(handle, body, headers=AUTH) -> httpx.Response:
    return httpx.post(handle.base_url + "/embeddings", json=body, headers=headers, timeout=30)


def _vector(r: httpx.Response, i: int = 0) -> np.ndarray:
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["data"][i]["embedding"], dtype=np.float64)


def _ledger_ids(path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT record_id FROM releases ORDER BY seq")]
    finally:
        db.close()


def test_record_ids_are_keyed_hmacs_of_the_canonical_text(server_key, tmp_path):
    """What the ledger names a text by: ``s:`` + the HMAC of its canonical form under the server
    key -- no plain digest of any form of the text that a holder of the ledger and a list of
    candidate texts could recompute (no dictionary attack on the ledger)."""
    ledger = tmp_path / "ledger.sqlite"
    texts = ["Jane Roe was admitted with acute pancreatitis", "  JOHN doe has\ta rare disease "]
    with proxy(server_key[0], server={"ledger": str(ledger)}, models=MODELS,
               api_keys=[API_KEYS[0]]) as (handle, _, _):  # fmt: skip
        assert _post(handle, {"model": "docs", "input": texts}).status_code == 200
    ids = _ledger_ids(ledger)
    assert sorted(ids) == sorted("s:" + text_record_id(server_key[1], t) for t in texts)
    plain = set()
    for t in texts:
        for form in {t, canonical_text(t), canonical_text(t, casefold=True)}:
            for h in (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.blake2b):
                hx = h(form.encode()).hexdigest()
                plain |= {hx, hx[:32], hx[:16]}
    blob = ledger.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite-*"))
    assert [d for d in plain if d.encode() in blob] == []
    # under another server key the same texts are other records
    assert not {text_record_id(bytes(32), t) for t in texts} & {i[2:] for i in ids}


def _two_backends(upstream: str, key_file) -> dict:
    raw = make_config(upstream, key_file, api_keys=[API_KEYS[0]], models={
        "docs": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 30.0}},
        "docs2": {"backend": "up2", "mechanism": "laplace", "params": {"epsilon": 30.0}},
    })  # fmt: skip
    raw["backends"]["up2"] = {**raw["backends"]["up"], "model": "fake-embed-v2"}
    return raw


def test_each_backend_draws_with_its_own_noise_key(server_key, tmp_path):
    """One text, one mechanism, two backends that return the same clean vector (the fake
    upstream under two model names): the two releases get independent noise, so their
    difference is not the (zero) clean difference."""
    import hmac
    import sqlite3

    from privembed.core import labels
    from privembed.keys.keyed import key_id

    text = "the same text through two backends"
    rows = []
    with serve_app(FakeUpstream().app) as upstream:
        raw = _two_backends(upstream, server_key[0])
        raw.setdefault("server", {})["ledger"] = str(tmp_path / "backends.sqlite")
        app = create_app(config_from_dict(raw))
        with running_server(app) as handle:
            for _ in range(2):  # each backend's noise is keyed: a repeat is identical
                r = _post(handle, {"model": "docs", "input": text})
                r2 = _post(handle, {"model": "docs2", "input": text})
                rows.append((_vector(r), _vector(r2)))
            identities = app.state.privembed.service._identity
    # the key each release was drawn under, as the ledger recorded it: HMAC(K, label || identity)
    db = sqlite3.connect(tmp_path / "backends.sqlite")
    recorded = {k for (k,) in db.execute("SELECT DISTINCT key_id FROM releases")}
    db.close()
    server = server_key[1]
    expected = {
        key_id(hmac.digest(server, labels.SERVE_BACKEND + identities[b].encode(), "sha256"))
        for b in ("up", "up2")
    }
    assert len(expected) == 2 and recorded == expected
    (a, b), (a_again, b_again) = rows
    assert np.array_equal(a, a_again) and np.array_equal(b, b_again)
    clean = clean_vector(text).astype(np.float64)
    na, nb = a - clean, b - clean  # (renormalised) noise of each backend
    assert not np.allclose(a, b, atol=1e-3)
    assert abs(float(na @ nb) / (np.linalg.norm(na) * np.linalg.norm(nb))) < 0.9


def test_no_api_key_and_no_server_key_in_the_logs(server_key, caplog):
    """Requests with a valid key, an unknown key and a malformed header: the log lines name the
    key by its configured name only; neither key, nor the server key, appears in any form."""
    wrong = "pe-a-wrong-key-that-must-not-be-logged"
    with proxy(server_key[0], models=MODELS, api_keys=[API_KEYS[0]]) as (handle, _, _):
        with caplog.at_level(logging.INFO, logger="privembed.server"):
            assert _post(handle, {"model": "docs", "input": "hello"}).status_code == 200
            bad = {"Authorization": f"Bearer {wrong}"}
            assert _post(handle, {"model": "docs", "input": "hello"}, bad).status_code == 401
            basic = {"Authorization": f"Basic {FULL_KEY}"}
            assert _post(handle, {"model": "docs", "input": "hello"}, basic).status_code == 401
            assert httpx.get(handle.url + "/metrics", headers=AUTH).status_code == 200
    lines = "\n".join(JsonFormatter().format(rec) for rec in caplog.records)
    assert '"key":"full"' in lines.replace(" ", "")  # the name is logged
    server = server_key[1]
    for secret in (FULL_KEY, wrong, server.hex(), server.hex().upper()):
        assert secret not in lines
        assert secret[3:15] not in lines  # not even a part of it


def test_the_servers_aes_generator_is_the_librarys_keyed_aes(server_key):
    """``generator = "aes"``: the server's release of a text is, bit for bit, the library's
    keyed AES release of that text (the backend's noise key, the text's record id and
    digest) -- and not the Philox one."""
    text = "a note released with AES-128 counter-mode noise"
    out, expected = {}, {}
    for gen in ("aes", "philox"):
        with proxy(server_key[0], models=MODELS, api_keys=[API_KEYS[0]],
                   server={"generator": gen}) as (handle, _, raw):  # fmt: skip
            out[gen] = _vector(_post(handle, {"model": "docs", "input": text}))
        cfg = config_from_dict(raw)
        ident = cfg.backends["up"].identity  # type, URL and model of this server's upstream
        mech = cfg.models["docs"].mechanism()  # the mechanism the server built from the table
        key = backend_key(load_key(server_key[0]), ident)
        with Release(mech, key=key, generator=gen, model=ident) as rel:
            Y = rel.protect(clean_vector(text)[None, :], [text_record_id(server_key[1], text)],
                            digests=text_digests([text], ident))  # fmt: skip
        expected[gen] = Y[0].astype(np.float64)
    np.testing.assert_allclose(out["aes"], expected["aes"], rtol=0, atol=1e-7)
    np.testing.assert_allclose(out["philox"], expected["philox"], rtol=0, atol=1e-7)
    assert not np.allclose(out["aes"], out["philox"], atol=1e-3)


# the refused start ends the server's thread with the error (what running_server re-raises)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_servers_budget_settings_never_raise_the_ledgers_budget(server_key, tmp_path):
    """Budgets are ledger state: the configuration may set a first budget or lower one; a
    configuration that would raise it refuses to start, and the ledger keeps its budget."""
    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as led:
        led.set_budget(epsilon=8.0, delta=1e-5)
    with serve_app(FakeUpstream().app) as upstream:
        for eps in (16.0, 8.5):
            raw = make_config(upstream, server_key[0], models=MODELS, api_keys=[API_KEYS[0]],
                              server={"ledger": str(ledger), "budget_epsilon": eps})  # fmt: skip
            with pytest.raises(Exception) as info:
                with running_server(create_app(config_from_dict(raw))):
                    pass
            chain, e = [], info.value
            while e is not None:
                chain.append(e)
                e = e.__cause__ or e.__context__
            assert any(isinstance(x, BudgetRaise) for x in chain), chain
        with Ledger(ledger, readonly=True) as led:
            assert tuple(led.budget) == (8.0, 1e-5)
        raw = make_config(upstream, server_key[0], models=MODELS, api_keys=[API_KEYS[0]],
                          server={"ledger": str(ledger), "budget_epsilon": 4.0})  # fmt: skip
        with running_server(create_app(config_from_dict(raw))) as handle:  # lowers it
            assert _post(handle, {"model": "docs", "input": "one"}).status_code == 200  # 4
            r = _post(handle, {"model": "wide", "input": "two"})  # 5 > 4: refused now
            assert r.status_code == 403 and r.json()["error"]["code"] == "privacy_budget_exceeded"
    with Ledger(ledger, readonly=True) as led:
        assert tuple(led.budget) == (4.0, 1e-5)


def test_texts_with_one_clean_vector_are_one_identity_through_the_server(server_key, tmp_path):
    """Variants that the model embeds to the same clean vector (accents, zero-width characters
    its tokenizer drops) but that the canonical form keeps apart: through a running server they
    are charged to the first one's record, and its budget stops them."""
    ledger = tmp_path / "ledger.sqlite"
    note = "Jose Alvarez was admitted with acute pancreatitis"
    variants = [
        "José Álvarez was admitted with acute pancreatitis",
        "Jose\u200b Alvarez was admitted with acute pancreatitis",
    ]
    assert len({text_record_id(server_key[1], t) for t in [note, *variants]}) == 3
    settings = {"ledger": str(ledger), "budget_epsilon": 8.0}  # two releases per identity
    with serve_app(FakeUpstream(fold=fold_variants).app) as upstream:
        raw = make_config(upstream, server_key[0], server=settings, models=MODELS,
                          api_keys=[API_KEYS[0]])  # fmt: skip
        with running_server(create_app(config_from_dict(raw))) as handle:
            assert _post(handle, {"model": "docs", "input": note}).status_code == 200
            assert _post(handle, {"model": "docs", "input": variants[0]}).status_code == 200
            r = _post(handle, {"model": "docs", "input": variants[1]})
            assert r.status_code == 403 and r.json()["error"]["code"] == "privacy_budget_exceeded"
            other = "Maria Lopez was admitted with a fracture"
            assert _post(handle, {"model": "docs", "input": other}).status_code == 200
    ids = _ledger_ids(ledger)
    first = "s:" + text_record_id(server_key[1], note)
    assert ids.count(first) == 2 and len(set(ids)) == 2  # the variant was charged to the note
