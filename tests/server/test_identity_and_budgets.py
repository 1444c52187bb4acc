"""Text identity, per-subject budgets and ledger contention through the server.

The attacks of "Guarantees that survive ordinary use", items 3 and 9: 256 case/whitespace
variants of one note used to get independent noise and pass a per-text budget of 8; a ledger
locked by another process stalled every request, queries included, while /healthz said 200.
"""

from __future__ import annotations

import sqlite3
import threading

import httpx
import numpy as np
import openai
import pytest

from privembed.keys.ledger import Ledger
from privembed.server import text_record_id
from privembed.server.service import Service

from .conftest import API_KEYS, FULL_KEY, proxy

AUTH = {"Authorization": f"Bearer {FULL_KEY}"}
#: Laplace epsilon 2 per unit l2: pure 4-LDP per release on unit vectors
MODELS = {
    "docs": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 2.0}},
    "queries": {"role": "queries", "documents": "docs"},
}


def _variants(note: str, n: int) -> list[str]:
    """``n`` distinct case / whitespace variants of ``note`` (same canonical, case-folded form)."""
    words = note.split()
    out: list[str] = []
    i = 0
    while len(out) < n:
        rng = np.random.default_rng(i)
        i += 1
        parts = [w.upper() if rng.random() < 0.5 else w for w in words]
        seps = [" " * int(rng.integers(1, 4)) for _ in parts[1:]]
        v = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True))
        v = " " * int(rng.integers(0, 3)) + v + "\n" * int(rng.integers(0, 2))
        if v not in out:
            out.append(v)
    return out


def _post(handle, body, headers=AUTH) -> httpx.Response:
    return httpx.post(handle.base_url + "/embeddings", json=body, headers=headers, timeout=30)


@pytest.mark.slow
def test_256_variants_of_one_note_share_one_identity_and_budget(server_key, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    note = "Jane Roe was admitted with acute pancreatitis"
    variants = _variants(note, 256)
    assert len(set(variants)) == 256
    assert len({text_record_id(server_key[1], v) for v in variants}) == 1  # one identity
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "budget_epsilon": 8.0, "max_inputs": 8},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        accepted, refused = [], 0
        for v in variants:
            r = _post(handle, {"input": v, "model": "docs", "encoding_format": "float"})
            if r.status_code == 200:
                accepted.append(np.array(r.json()["data"][0]["embedding"]))
            else:
                assert r.status_code == 403 and "per-text privacy budget" in r.text
                refused += 1
        # budget 8, each variant a new release of the one identity (4-LDP): two pass, no more
        assert len(accepted) == 2 and refused == 254
        # the exact text released before is a free, identical re-release
        again = _post(handle, {"input": variants[0], "model": "docs", "encoding_format": "float"})
        assert again.status_code == 200
        np.testing.assert_array_equal(np.array(again.json()["data"][0]["embedding"]), accepted[0])
    with Ledger(ledger, readonly=True) as led:
        spent = led.spent()
    assert len(spent) == 1 and spent[0].epsilon == pytest.approx(8.0)


def test_subject_budget_is_enforced_through_the_openai_client(server_key, tmp_path):
    """A gateway key that may name subjects (``may_assert_subjects``): each subject it names
    has its own budget, under the key's namespace."""
    ledger = tmp_path / "ledger.sqlite"
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "subject_budget_epsilon": 10.0},
        models=MODELS,
        api_keys=[{**API_KEYS[0], "may_assert_subjects": True}],
    ) as (handle, _, _):
        c = openai.OpenAI(base_url=handle.base_url, api_key=FULL_KEY, max_retries=0, timeout=30)
        try:
            # alice: two distinct texts (4 + 4 = 8 <= 10), a third would make 12
            c.embeddings.create(model="docs", input=["first note", "second note"], user="alice")
            with pytest.raises(openai.PermissionDeniedError, match="subject's privacy budget"):
                c.embeddings.create(model="docs", input="a third, different note", user="alice")
            # re-releasing alice's texts is free; another subject has its own budget
            c.embeddings.create(model="docs", input="first note", user="alice")
            c.embeddings.create(model="docs", input="a third, different note", user="bob")
        finally:
            c.close()
        # the header names a subject when the body does not
        r = _post(
            handle, {"input": "x1", "model": "docs"}, {**AUTH, "X-Privembed-Subject": "carol"}
        )
        assert r.status_code == 200
    with Ledger(ledger, readonly=True) as led:
        assert led.spent_subject("key:full/alice").epsilon == pytest.approx(8.0)
        assert led.spent_subject("key:full/bob").epsilon == pytest.approx(4.0)
        assert led.spent_subject("key:full/carol").epsilon == pytest.approx(4.0)


def test_a_budget_refusal_says_what_is_spent_and_left_for_this_request_only(server_key, tmp_path):
    """The issue (39.8): the 403 said only which budget refused. It says what is spent and what
    is left -- of the request's texts that are spent (by their index in ``input``) and of the
    requesting subject -- and what one release costs, in the message and as ``error.budget``.
    Nothing about other texts or subjects: bob's release of a text in alice's request, which
    that text's budget still holds, stays invisible."""
    ledger = tmp_path / "ledger.sqlite"
    note = _variants("Jane Roe was admitted with acute pancreatitis", 3)
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "budget_epsilon": 8.0, "subject_budget_epsilon": 20.0},
        models=MODELS,
        api_keys=[{**API_KEYS[0], "may_assert_subjects": True}],
    ) as (handle, _, _):

        def post(texts, user):
            return _post(handle, {"input": texts, "model": "docs", "user": user})

        for variant in note[:2]:  # one identity: the note's budget is spent, 4 + 4 of 8
            assert post(variant, "alice").status_code == 200
        assert post("bob's own text", "bob").status_code == 200  # 4 of 8
        r = post(["a new text", note[2], "bob's own text"], "alice")
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["code"] == "privacy_budget_exceeded" and err["param"] == "input"
        budget = err["budget"]
        assert budget["scope"] == "text"
        assert budget["release_cost"] == {"epsilon": pytest.approx(4.0), "delta": 0.0}
        [spent_text] = budget["inputs"]  # input 1 only: the others' budgets hold
        assert spent_text["index"] == 1
        assert spent_text["budget"] == {"epsilon": 8.0, "delta": 1e-5}
        assert spent_text["spent"]["epsilon"] == pytest.approx(8.0)
        assert spent_text["left"] == {"epsilon": pytest.approx(0.0)}
        alice = budget["subject"]
        assert alice["budget"]["epsilon"] == 20.0
        assert alice["spent"]["epsilon"] == pytest.approx(8.0)
        assert alice["left"] == {"epsilon": pytest.approx(12.0)}
        message = err["message"]
        assert "input 1 has spent epsilon=8" in message and "input 2" not in message
        assert "This subject has spent epsilon=8" in message and "epsilon 12 left" in message
        assert "bob" not in r.text

        # the subject's budget: 8 spent, 12 left, four fresh texts need 16
        r = post(["one", "two", "three", "four"], "alice")
        assert r.status_code == 403, r.text
        budget = r.json()["error"]["budget"]
        assert budget["scope"] == "subject" and budget["inputs"] == []
        assert budget["subject"]["left"] == {"epsilon": pytest.approx(12.0)}
        assert "this subject's privacy budget" in r.json()["error"]["message"]


def test_a_locked_ledger_gives_503_and_degraded_health(server_key, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 0.5},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the ledger
        try:
            r = _post(handle, {"input": "needs the ledger", "model": "docs"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "ledger_busy"
            assert int(r.headers["Retry-After"]) >= 1
            health = httpx.get(handle.url + "/healthz").json()
            assert health["ledger"]["state"] == "busy" and health["status"] == "degraded"
            assert _post(handle, {"input": "a query", "model": "queries"}).status_code == 200
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert _post(handle, {"input": "needs the ledger", "model": "docs"}).status_code == 200
        health = httpx.get(handle.url + "/healthz").json()
        assert health["ledger"]["state"] == "ok" and health["status"] == "ok"


def test_queries_never_wait_for_a_locked_ledger(server_key, tmp_path):
    """A release that waits for the ledger's lock does not hold up queries: a query is
    answered while a documents request is still waiting (no clock involved)."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 600.0, "request_timeout_s": 600.0},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, fake, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the ledger
        result: dict[str, httpx.Response] = {}
        waiting = threading.Thread(
            target=lambda: result.update(r=_post(handle, {"input": "blocked", "model": "docs"}))
        )
        try:
            n = len(fake.calls)
            waiting.start()
            assert fake.wait_for_calls(n + 1)  # embedded; its release now waits for the lock
            assert _post(handle, {"input": "a query", "model": "queries"}).status_code == 200
            assert waiting.is_alive() and "r" not in result  # still waiting for the ledger
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            waiting.join(60)
        assert result["r"].status_code == 200


def test_texts_with_one_clean_vector_share_an_identity(tmp_path):
    """The alias rule: a clean vector first seen under identity A claims later texts (the
    tags are HMACs of the vectors under the backend's key, kept in the ledger)."""
    svc = Service.__new__(Service)
    svc._bkeys = {"b": bytes(32), "c": bytes(range(32))}
    X = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    tags = svc.alias_tags("b", X)
    assert len(set(tags)) == 3 and all(len(t) == 32 for t in tags)
    assert svc.alias_tags("c", X)[0] != tags[0]  # another backend, other tags
    with Ledger(tmp_path / "l.db") as led:
        assert led.claim_aliases(tags, ["a", "b", "c"]) == ["a", "b", "c"]
        # "z" embeds exactly like "a" (a variant the canonical form missed): it becomes "a"
        assert led.claim_aliases(svc.alias_tags("b", X[[0, 2]]), ["z", "y"]) == ["a", "c"]
