"""Configuration loading: every invalid setting is refused with the table and key named; the
``privembed serve`` command's --check and --new-api-key; the batcher and rate limiter units."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.embedders import BACKENDS
from privembed.keys.keyed import keygen
from privembed.server import (
    BackendConfig,
    ConfigError,
    ServerSettings,
    config_from_dict,
    hash_api_key,
    load_config,
)
from privembed.server.batcher import MicroBatcher, QueueFull, ShuttingDown
from privembed.server.config import RUNTIMES

KEY = bytes(range(32))
GOOD_MODEL = {"mechanism": "gaussian", "params": {"epsilon": 8.0, "delta": 1e-5}}
ONE_KEY = [{"name": "a", "sha256": hash_api_key("pe-a")}]


def cfg(**tables):
    base = {"models": {"docs": GOOD_MODEL}, "api_keys": ONE_KEY}
    base.update(tables)
    return config_from_dict(base, key=KEY, source="serve.toml")


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"sever": {}}, r"serve.toml: unknown key\(s\) 'sever'"),
        ({"server": {"max_inputs": 0}}, r"\[server\] max_inputs must be > 0, got max_inputs=0"),
        ({"server": {"port": "80"}}, r"\[server\] port must be int"),
        ({"server": {"noise": "none"}}, r"noise must be one of 'keyed', 'fresh'"),
        ({"server": {"budget_epsilon": 5.0}}, r"budgets need a ledger"),
        ({"server": {"max_inputs": 10, "max_queue": 5}}, r"max_queue \(5\) must be >= max_inputs"),
        ({"server": {"cache_siz": 3}}, r"\[server\] unknown key\(s\) 'cache_siz'"),
        ({"models": {}}, r"at least one \[models.NAME\] table"),
        (
            {"models": {"docs": {"mechanism": "gaussian", "params": {"epsilon": -1, "delta": 1e-5}}}},
            r"\[models.docs\] params: epsilon must be > 0, got epsilon=-1",
        ),
        (
            {"models": {"docs": {"mechanism": "gaussian", "params": {"epsilon": 1, "sigma": 2}}}},
            r"\[models.docs\] params: mechanism 'gaussian' does not take sigma \(--sigma\)",
        ),
        ({"models": {"docs": {"mechanism": "gausian"}}}, r"\[models.docs\] mechanism: mechanism must be one of"),
        ({"models": {"docs": {"role": "documents"}}}, r"mechanism is required for role = 'documents'"),
        ({"models": {"docs": {**GOOD_MODEL, "role": "both"}}}, r"role must be one of"),
        ({"models": {"docs": {**GOOD_MODEL, "backend": "gpu"}}}, r"backend 'gpu' is not defined"),
        (
            {"models": {"docs": {**GOOD_MODEL, "dimensions": [8]}}},
            r"dimensions: only a mechanism with an output-dimension parameter",
        ),
        (
            {"models": {"docs": GOOD_MODEL, "q": {"role": "queries", "documents": "docs", "query": "project"}}},
            r"\[models.q\] query = 'project' needs a projection documents model",
        ),
        (
            {
                "models": {
                    "p": {"mechanism": "projection", "params": {"k": 8, "epsilon": 5, "delta": 1e-5}},
                    "q": {"role": "queries", "documents": "p", "query": "none"},
                }
            },
            r"query = 'none' would give backend-dimension vectors",
        ),
        ({"models": {"docs": GOOD_MODEL, "q": {"role": "queries"}}}, r"\[models.q\] documents .* is required"),
        ({"models": {"docs": GOOD_MODEL, "q": {"role": "queries", "documents": "nope"}}}, r"is not a documents model"),
        ({"api_keys": [{"name": "a", "sha256": "pe-plaintext-key"}]}, r"sha256 must be the 64-hex-digit SHA-256"),
        ({"api_keys": [{"sha256": hash_api_key("x"), "models": ["nope"]}]}, r"models: unknown model\(s\) 'nope'"),
        ({"api_keys": [{"sha256": hash_api_key("x"), "burst": 3}]}, r"burst needs rate_limit"),
        ({"api_keys": ONE_KEY * 2}, r"names must be unique"),
        ({"api_keys": []}, r"no \[\[api_keys\]\] configured"),
        (
            {"api_keys": [], "server": {"allow_unauthenticated": True, "host": "0.0.0.0"}},
            r"allow_unauthenticated = true is only allowed on a loopback host",
        ),
        ({"backends": {"up": {"type": "upstream", "model": "m"}}}, r"\[backends.up\] base_url is required"),
        (
            {"backends": {"up": {"type": "upstream", "model": "m", "base_url": "ftp://x"}}},
            r"base_url must be an http\(s\) URL",
        ),
        (
            {"backends": {"up": {"type": "upstream", "model": "m", "base_url": "https://u:p@x"}}},
            r"must not contain credentials",
        ),
        ({"backends": {"up": {"type": "local", "base_url": "x"}}}, r"\[backends.up\] unknown key\(s\) 'base_url'"),
        ({"backends": {"up": {"type": "remote"}}}, r"type must be one of 'local', 'upstream'"),
    ],
)  # fmt: skip
def test_invalid_configs_name_the_setting(tables, message):
    with pytest.raises(ConfigError, match=message):
        cfg(**tables)


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"sever": {}, "bla": 1}, "serve.toml: unknown key(s) 'sever', 'bla'; allowed: api_keys, backends, models, server."),
        ({"server": {"key_file": 5}}, "serve.toml: [server] key_file must be a path string, got key_file=5."),
        ({"server": {"request_timeout_s": float("inf")}}, "[server] request_timeout_s must be a finite number, got request_timeout_s=inf."),
        ({"server": {"max_wait_ms": 1e4}}, "[server] max_wait_ms must be <= 1000, got max_wait_ms=10000.0."),
        ({"server": {"subject_header": "a b"}}, "[server] subject_header is not a header name, got subject_header='a b'."),
        ({"server": []}, "serve.toml: [server] must be a table, got list."),
        ({"backends": {"b": {}}}, "[backends.b] type is required (one of 'local', 'upstream')."),
        (
            {"backends": {"b": {"type": "upstream", "base_url": "http://x", "model": "m", "max_attempts": 0}}},
            "[backends.b] max_attempts must be >= 1, got max_attempts=0.",
        ),
        (
            {"backends": {"b": {"type": "local", "runtime": "tf"}}},
            "[backends.b] runtime must be one of 'auto', 'torch', 'onnx', 'onnx-int8', got runtime='tf'.",
        ),
        ({"backends": {"b": {"type": "local", "runtime": "onnx", "device": "cuda"}}}, "runs on the CPU, got device='cuda'"),
        (
            {"models": {"p": {"mechanism": "projection", "params": {"k": 8, "epsilon": 5, "delta": 1e-5}, "dimensions": [4, -1]}}},
            "[models.p] dimensions[1] must be > 0, got dimensions[1]=-1.",
        ),
        ({"models": {"docs": {**GOOD_MODEL, "documents": "x"}}}, "[models.docs] documents is only for role = 'queries'."),
        ({"api_keys": [{"name": "a"}]}, "[[api_keys]] #1 sha256 is required."),
        ({"api_keys": [{"sha256": "0" * 64, "rate_limit": True}]}, "[[api_keys]] #1 rate_limit must be int or float, got rate_limit=True."),
        ({"api_keys": [{"sha256": "0" * 64, "models": "docs"}]}, "[[api_keys]] #1 models must be a list, got models='docs'."),
    ],
)  # fmt: skip
def test_messages_name_the_key_path_and_value(tables, message):
    with pytest.raises(ConfigError) as e:
        cfg(**tables)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_pasted_key_is_never_echoed():
    with pytest.raises(ConfigError) as e:
        cfg(api_keys=[{"name": "a", "sha256": "pe-the-secret-key-itself"}])
    assert "pe-the-secret-key-itself" not in str(e.value)


def test_defaults_of_the_schema_and_the_resolved_backend_agree():
    """A backend table with only its type gives the documented defaults (one source of truth)."""
    c = cfg(
        backends={
            "local": {"type": "local"},
            "up": {"type": "upstream", "base_url": "https://x/v1", "model": "m"},
        },
        models={"a": GOOD_MODEL, "b": {**GOOD_MODEL, "backend": "up"}},
    )
    assert c.backends["local"] == BackendConfig(name="local", type="local")
    assert c.backends["up"] == BackendConfig(
        name="up", type="upstream", base_url="https://x/v1", model="m", max_concurrency=4
    )
    assert RUNTIMES == BACKENDS
    assert c.server == ServerSettings()
    assert c.api_keys[0].name == "a" and c.api_keys[0].models == ("*",)


def test_relative_paths_are_resolved_against_the_file(tmp_path):
    c = config_from_dict(
        {
            "server": {"ledger": "sub/ledger.sqlite"},
            "models": {"docs": GOOD_MODEL},
            "api_keys": ONE_KEY,
        },
        key=KEY,
        base_dir=tmp_path,
    )
    assert c.server.ledger == tmp_path / "sub" / "ledger.sqlite"


def test_valid_config_resolves_query_treatments():
    c = cfg(
        models={
            "docs": GOOD_MODEL,
            "q": {"role": "queries", "documents": "docs"},
            "qp": {"role": "queries", "documents": "docs", "query": "protect"},
            "p": {
                "mechanism": "projection",
                "params": {"k": 8, "epsilon": 5, "delta": 1e-5},
                "dimensions": [4, 8],
            },
            "pq": {"role": "queries", "documents": "p"},
        }
    )
    t = {n: (m.role, m.treatment) for n, m in c.models.items()}
    assert t == {
        "docs": ("documents", "protect"),
        "q": ("queries", "none"),
        "qp": ("queries", "protect"),
        "p": ("documents", "protect"),
        "pq": ("queries", "project"),
    }
    assert c.models["p"].allowed_dims == (4, 8) == c.models["pq"].allowed_dims
    assert c.models["q"].mechanism(None) is None
    assert c.models["qp"].mechanism(None) is c.models["docs"].mechanism(None)
    assert list(c.backends) == ["local"]  # the default offline backend, not loaded yet


def test_key_file_is_required_and_checked(tmp_path):
    toml = tmp_path / "serve.toml"
    toml.write_text(
        '[server]\nallow_unauthenticated = true\n[models.docs]\nmechanism = "laplace"\n'
        "params = { epsilon = 50.0 }\n"
    )
    with pytest.raises(ConfigError, match=r"key_file is required"):
        load_config(toml)
    keyfile = tmp_path / "serve.key"
    keygen(keyfile)
    toml.write_text('[server]\nkey_file = "serve.key"\n' + toml.read_text().split("\n", 1)[1])
    c = load_config(toml)
    assert c.server.key_file == keyfile and len(c.key) == 32
    os.chmod(keyfile, 0o644)
    with pytest.raises(ConfigError, match=r"key_file: key file .* must not be readable"):
        load_config(toml)
    toml.write_text("[server\n")
    with pytest.raises(ConfigError, match=r"invalid TOML"):
        load_config(toml)


def test_example_config_holds_no_usable_key_and_is_valid_once_filled_in(tmp_path):
    example = Path(__file__).parents[2] / "examples" / "serve.toml"
    text = example.read_text()
    (tmp_path / "serve.toml").write_text(text)
    keygen(tmp_path / "serve.key")
    with pytest.raises(ConfigError, match=r"no \[\[api_keys\]\] configured"):
        load_config(tmp_path / "serve.toml")
    mine = hash_api_key("pe-" + "x" * 40)
    (tmp_path / "serve.toml").write_text(
        text + f'\n[[api_keys]]\nname = "app"\nsha256 = "{mine}"\n'
    )
    c = load_config(tmp_path / "serve.toml")
    assert c.models and c.api_keys


def test_documented_example_key_hashes_are_refused(tmp_path):
    """The example key printed in the docs (and its hash, formerly in examples/) never works."""
    runner = CliRunner()
    keygen(tmp_path / "serve.key")
    (tmp_path / "serve.toml").write_text(
        '[server]\nkey_file = "serve.key"\n[models.docs]\nmechanism = "laplace"\n'
        'params = { epsilon = 50.0 }\n[[api_keys]]\nname = "app"\n'
        f'sha256 = "{hash_api_key("pe-example-do-not-use")}"\n'
    )
    r = runner.invoke(app, ["serve", "--config", str(tmp_path / "serve.toml"), "--check"])
    assert r.exit_code == 2 and "printed in privembed's documentation" in " ".join(r.output.split())


def test_cli_check_and_new_api_key(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--new-api-key"])
    assert r.exit_code == 0, r.output
    key = next(ln for ln in r.output.splitlines() if ln.startswith("pe-"))
    assert hash_api_key(key) in r.output
    keygen(tmp_path / "serve.key")
    (tmp_path / "serve.toml").write_text(
        '[server]\nkey_file = "serve.key"\n[models.docs]\nmechanism = "laplace"\n'
        f'params = {{ epsilon = 50.0 }}\n[[api_keys]]\nname = "app"\nsha256 = "{hash_api_key(key)}"\n'
    )
    r = runner.invoke(app, ["serve", "--config", str(tmp_path / "serve.toml"), "--check"])
    assert r.exit_code == 0, r.output
    assert "OK" in r.output and "model docs" in r.output and "1 API key(s)" in r.output
    r = runner.invoke(app, ["serve", "--config", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "config file not found" in r.output
    r = runner.invoke(app, ["serve"])
    assert r.exit_code == 2 and "--config is required" in r.output


def test_batcher_refuses_when_full_and_drains_on_stop():
    async def run():
        gate, busy = asyncio.Event(), asyncio.Event()
        seen: list[int] = []

        async def process(jobs):
            busy.set()
            await gate.wait()
            for j in jobs:
                seen.append(j.size)
                j.future.set_result(j.size)

        b = MicroBatcher(process, max_batch=4, max_wait=0.0, max_queue=4)
        b.start()
        first = b.enqueue(["a"] * 4)
        await busy.wait()  # taken by the worker, which waits on the gate
        second = b.enqueue(["b"] * 4)  # fills the queue
        assert b.pending == 4
        with pytest.raises(QueueFull):
            b.enqueue(["c"])
        stopping = asyncio.create_task(b.stop())
        await asyncio.sleep(0)  # one turn of the loop: stop() has begun (no time passes)
        with pytest.raises(ShuttingDown):
            b.enqueue(["d"])
        gate.set()
        await stopping
        return await first, await second, seen

    assert asyncio.run(run()) == (4, 4, [4, 4])


def test_batcher_waits_for_company_by_its_clock():
    now = [0.0]
    batches: list[list[str]] = []

    async def run():
        async def process(jobs):
            batches.append([j.payload[0] for j in jobs])
            for j in jobs:
                j.future.set_result(None)

        b = MicroBatcher(process, max_batch=3, max_wait=10.0, max_queue=100, clock=lambda: now[0])
        b.start()
        a = b.enqueue(["a"])
        await asyncio.sleep(0)  # the worker waits for company: 10 s by its clock
        assert batches == []
        now[0] = 11.0  # the oldest job is past max_wait: the next wakeup sends the batch
        c = b.enqueue(["c"])
        await asyncio.gather(a, c)
        assert batches == [["a", "c"]]
        await asyncio.gather(*(b.enqueue([x]) for x in "def"))  # a full batch goes at once
        await b.stop()

    asyncio.run(run())
    assert batches == [["a", "c"], ["d", "e", "f"]]


def test_a_backend_built_in_code_has_the_defaults_of_a_file():
    """BackendConfig's defaults are the tables' own (max_concurrency was 1 in code and 4 in a
    file): every key of either table is a field, with the table's default."""
    import dataclasses

    from privembed.server.config_file import LocalTable, UpstreamTable

    fields = {f.name: f for f in dataclasses.fields(BackendConfig)}
    for table in (LocalTable, UpstreamTable):
        for key, info in table.model_fields.items():
            assert key in fields, key
            if key not in ("type", "model", "base_url", "api_key_env", "dimensions"):
                assert fields[key].default == info.default, key
    assert BackendConfig(name="u", type="upstream").max_concurrency == 4
