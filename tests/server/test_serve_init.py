"""The serve quick start (issue 28.7): ``privembed serve --init`` writes a valid starter
configuration with a fresh key file and prints one API key once; the example file becomes valid
by appending what ``--new-api-key`` prints; configuration errors name their table as written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.server import hash_api_key, load_config
from privembed.server.starter import init_config, starter_config

runner = CliRunner()
EXAMPLE = Path(__file__).parents[2] / "examples" / "serve.toml"


def _said(r) -> str:
    return " ".join((r.stdout + r.stderr).split())


def test_init_writes_a_valid_config_a_key_file_and_prints_the_api_key_once(tmp_path):
    cfg = tmp_path / "serve.toml"
    r = runner.invoke(app, ["serve", "--init", "--config", str(cfg)])
    assert r.exit_code == 0, _said(r)
    keys = [ln for ln in r.stdout.splitlines() if ln.startswith("pe-")]
    assert len(keys) == 1 and r.stdout.strip() == keys[0]  # stdout holds the key, nothing else
    assert keys[0] not in r.stderr and keys[0] not in cfg.read_text()
    key_file = tmp_path / "serve.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    c = load_config(cfg)
    assert [k.sha256 for k in c.api_keys] == [hash_api_key(keys[0])]
    assert c.models and c.server.host == "127.0.0.1"
    r = runner.invoke(app, ["serve", "--config", str(cfg), "--check"])
    assert r.exit_code == 0 and "OK" in r.stdout, _said(r)
    assert "model minilm-private [documents, backend local]" in _said(r)  # not eaten as markup


def test_init_in_the_current_folder_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["serve", "--init"])
    assert r.exit_code == 0, _said(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serve.key", "serve.toml"]


@pytest.mark.parametrize("existing", ["serve.toml", "serve.key"])
def test_init_refuses_to_replace_anything_and_writes_nothing(tmp_path, existing):
    (tmp_path / existing).write_text("mine\n")
    os.chmod(tmp_path / existing, 0o600)
    r = runner.invoke(app, ["serve", "--init", "--config", str(tmp_path / "serve.toml")])
    assert r.exit_code == 2 and "already exists" in _said(r) and existing in _said(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "mine\n"
    assert "pe-" not in r.stdout


def test_init_removes_the_key_file_when_the_config_cannot_be_written(tmp_path, monkeypatch):
    """A fault between the key file and the config leaves neither behind."""
    import privembed.server.starter as starter

    def broken(*_a, **_k):
        raise OSError("invalid (injected)")

    monkeypatch.setattr(starter, "config_from_dict", broken)
    with pytest.raises(OSError, match="injected"):
        init_config(tmp_path / "serve.toml")
    assert list(tmp_path.iterdir()) == []


def test_the_starter_text_refuses_a_bad_hash():
    with pytest.raises(ValueError, match="api_key_sha256"):
        starter_config(key_file="serve.key", api_key_sha256="PASTE")


def test_the_example_becomes_valid_by_appending_the_printed_block(tmp_path):
    """The quick start as docs/server.md writes it: keygen, append --new-api-key's block."""
    cfg = tmp_path / "serve.toml"
    cfg.write_text(EXAMPLE.read_text())
    assert runner.invoke(app, ["keygen", "-o", str(tmp_path / "serve.key")]).exit_code == 0
    r = runner.invoke(app, ["serve", "--config", str(cfg), "--check"])
    assert r.exit_code == 2 and "no [[api_keys]] configured" in _said(r)  # holds no usable key
    r = runner.invoke(app, ["serve", "--new-api-key"])
    assert r.exit_code == 0
    key, *block = r.stdout.splitlines()
    with cfg.open("a") as fh:
        fh.write("\n" + "\n".join(block) + "\n")
    r = runner.invoke(app, ["serve", "--config", str(cfg), "--check"])
    assert r.exit_code == 0 and "1 API key(s)" in _said(r), _said(r)
    assert load_config(cfg).api_keys[0].sha256 == hash_api_key(key)
    # a second client: the printed name differs, so the block appends as it is
    r = runner.invoke(app, ["serve", "--new-api-key"])
    with cfg.open("a") as fh:
        fh.write("\n" + "\n".join(r.stdout.splitlines()[1:]) + "\n")
    r = runner.invoke(app, ["serve", "--config", str(cfg), "--check"])
    assert r.exit_code == 0 and "2 API key(s)" in _said(r), _said(r)


def test_an_api_keys_error_names_the_table_as_written(tmp_path):
    """Rich markup used to eat '[api_keys]' out of '[[api_keys]] #1' (printed as '[] #1')."""
    assert runner.invoke(app, ["keygen", "-o", str(tmp_path / "serve.key")]).exit_code == 0
    (tmp_path / "serve.toml").write_text(
        '[server]\nkey_file = "serve.key"\n[models.docs]\nmechanism = "laplace"\n'
        'params = { epsilon = 50.0 }\n[[api_keys]]\nname = "app"\nsha256 = "PASTE"\n'
    )
    r = runner.invoke(app, ["serve", "--config", str(tmp_path / "serve.toml"), "--check"])
    assert r.exit_code == 2 and "[[api_keys]] #1 sha256 must be" in _said(r), _said(r)


def test_without_a_config_serve_points_at_init():
    r = runner.invoke(app, ["serve"])
    assert r.exit_code == 2 and "privembed serve --init" in _said(r)
    assert "examples/" not in _said(r)
