"""``privembed serve``: run the OpenAI-compatible embeddings proxy (extra ``serve``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import OptionGroup, console, err_console, fail, user_errors, with_option_groups


@dataclass
class Listen(OptionGroup):
    """The address the server listens on: the configuration's, or these options'."""

    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default: server.host of the config).")
    ] = None
    port: Annotated[int | None, typer.Option(help="Port (default: server.port of the config).")] = (
        None
    )

    def address(self, cfg: Any) -> tuple[str, int]:
        """The host and port to listen on, under the configuration ``cfg``."""
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got port={self.port}.")
        port = cfg.server.port if self.port is None else self.port
        return self.host or cfg.server.host, port


@dataclass
class Actions(OptionGroup):
    """What serve does instead of serving: check the configuration, make an API key, or write
    a starter configuration -- then exit."""

    check: Annotated[
        bool, typer.Option("--check", help="Validate the configuration, print it, and exit.")
    ] = False
    new_api_key: Annotated[
        bool,
        typer.Option(
            "--new-api-key", help="Print a new random API key and its config entry, then exit."
        ),
    ] = False
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Write a starter config (--config, default serve.toml) with a new key file "
            "beside it, print its API key once, and exit. Never replaces a file.",
        ),
    ] = False
    from_advice: Annotated[
        Path | None,
        typer.Option(
            "--from-advice",
            help="With --init: take the documents' mechanism and epsilon from a saved "
            "recommendation (privembed advise --save FILE; evaluate writes advice.json).",
        ),
    ] = None

    def run_without_config(self, config: Path | None) -> bool:
        """Do the action that needs no configuration (--init, --new-api-key), if one is asked
        for: True when done."""
        if self.from_advice is not None and not self.init:
            raise ValueError("--from-advice starts a configuration: use it with --init.")
        if self.init:
            _init_config(Path("serve.toml") if config is None else config, self.from_advice)
            return True
        if self.new_api_key:
            _print_new_api_key()
            return True
        return False


@user_errors
@with_option_groups
def serve(
    *,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Server configuration (TOML).")
    ] = None,
    listen: Listen,
    actions: Actions,
) -> None:
    """Serve protected embeddings at POST /v1/embeddings (OpenAI-compatible)."""
    from ..server import check_bind, create_app, load_config

    if actions.run_without_config(config):
        return
    if config is None:
        fail("--config is required (a TOML file; 'privembed serve --init' writes a starter one).")
        return
    cfg = load_config(config)
    h, p = listen.address(cfg)
    check_bind(cfg.server, h, source=str(config))  # the address it will listen on
    if actions.check:
        _print_check(cfg, config)
        return
    from ..server import serve_forever

    err_console.print(f"privembed serve: http://{h}:{p}/v1 (models: {', '.join(cfg.models)})")
    serve_forever(create_app(cfg), host=h, port=p)


def _init_config(target: Path, advice: Path | None = None) -> None:
    """``--init``: write a starter config and its noise key, and print its API key once."""
    from ..server.starter import init_config

    doc = None
    if advice is not None:
        from ..evaluation.modes import load_advice

        doc = load_advice(advice)
    api_key, key_path = init_config(target, advice=doc)
    err_console.print(
        f"wrote {target} and its noise key {key_path} (mode 0600; keep it secret and backed "
        "up). The API key for your client, shown once (only its hash is in the config):",
        highlight=False,
        markup=False,
    )
    console.print(api_key, highlight=False, markup=False)
    err_console.print(
        f"next: privembed serve --config {target} --check, then privembed serve --config "
        f"{target} (the local model needs the embed extra).",
        highlight=False,
        markup=False,
    )


def _print_new_api_key() -> None:
    """``--new-api-key``: a new key for the client, and the config entry that holds its hash."""
    from ..server import hash_api_key
    from ..server import new_api_key as make_key

    key = make_key()
    digest = hash_api_key(key)
    err_console.print(
        "give the key (first line) to the client; append the rest to the config's end:"
    )
    console.print(key, highlight=False)
    console.print(
        f'[[api_keys]]\nname = "key-{digest[:8]}"\nsha256 = "{digest}"\n'
        'models = ["*"]\nrate_limit = 600  # requests per minute',
        highlight=False,
        markup=False,
    )


def _print_check(cfg: Any, config: Path) -> None:
    """``--check``: the validated configuration -- key id, models, API keys, ledger -- and a
    warning for each upstream backend whose API key variable is not set."""
    import os

    from ..keys.keyed import key_id
    from ..keys.ledger_pg import redact_url

    console.print(f"config {config}: OK (key id {key_id(cfg.key)}, noise {cfg.server.noise})")
    for m in cfg.models.values():
        console.print(
            f"  model {m.name} [{m.role}, backend {m.backend}]: {m.describe()}",
            markup=False,  # rich would take "[documents, ...]" for a style tag
        )
    led = cfg.server.ledger
    console.print(
        f"  {len(cfg.api_keys)} API key(s); ledger: {redact_url(str(led)) if led else 'none'}"
    )
    for b in cfg.backends.values():
        if b.api_key_env and not os.environ.get(b.api_key_env):
            err_console.print(
                f"warning: backend {b.name}: environment variable {b.api_key_env} "
                "(the upstream API key) is not set; the server will not start without it."
            )


def register(app: typer.Typer) -> None:
    """Attach the ``serve`` command to the main app."""
    app.command(name="serve")(serve)
