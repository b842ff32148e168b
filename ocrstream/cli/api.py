"""``ocrstream api``: the HTTP API; ``ocrstream api keys create|secret --tenant NAME``."""

from __future__ import annotations

import signal
import sys

import click


@click.group("api", invoke_without_command=True)
@click.option("--port", type=int, default=None, help="Port (default OCRSTREAM_API_PORT, 8080).")
@click.option("--host", default=None, help="Address (default OCRSTREAM_API_HOST, 0.0.0.0).")
@click.pass_context
def api(ctx: click.Context, port: int | None, host: str | None) -> None:
    """Serve the HTTP API (FastAPI on uvicorn): uploads, status, outputs, /docs."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from ocrstream.api.app import create_app
    from ocrstream.settings import (
        ApiSettings,
        KafkaSettings,
        LimitsSettings,
        S3Settings,
        WebhookSettings,
    )

    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler it
    # found: this one makes that a clean exit 0, as the agents' is.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    settings = ApiSettings()
    app = create_app(settings, KafkaSettings(), S3Settings(), LimitsSettings(),
                     webhooks=WebhookSettings())  # fmt: skip
    # log_config=None: the logging the entry point configured stays (JSON lines included).
    uvicorn.run(app, host=host or settings.host, port=port or settings.port, log_config=None,
                timeout_graceful_shutdown=10)  # fmt: skip


@api.group()
def keys() -> None:
    """Tenants' API keys (only their SHA-256 is kept, in OCRSTREAM_API_KEYS_FILE)."""


@keys.command("create")
@click.option("--tenant", required=True, help="The tenant the key acts for.")
def create(tenant: str) -> None:
    """Make a key for TENANT and print it, once: it cannot be shown again. A tenant's first key
    also makes its webhook signing secret, printed once on stderr."""
    from ocrstream.api.keys import KeyFile
    from ocrstream.api.webhook_secrets import SecretFile
    from ocrstream.settings import ApiSettings, WebhookSettings

    settings, webhooks = ApiSettings(), WebhookSettings()
    try:
        key = KeyFile(settings.keys_file).create(tenant)
        secret = SecretFile(webhooks.secrets_file).ensure(tenant)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--tenant") from e
    click.echo(key)
    click.echo(f"(tenant {tenant}; its hash is in {settings.keys_file})", err=True)
    if secret is not None:
        click.echo(f"webhook signing secret of {tenant} (shown once; `ocrstream api keys secret` "
                   f"makes a new one): {secret}", err=True)  # fmt: skip


@keys.command("secret")
@click.option("--tenant", required=True, help="The tenant whose webhooks are signed with it.")
def secret(tenant: str) -> None:
    """Make a new webhook signing secret for TENANT (replacing its old one) and print it, once.
    Receivers check X-Ocrstream-Signature with it."""
    from ocrstream.api.webhook_secrets import SecretFile
    from ocrstream.settings import WebhookSettings

    settings = WebhookSettings()
    try:
        made = SecretFile(settings.secrets_file).rotate(tenant)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--tenant") from e
    click.echo(made)
    click.echo(f"(tenant {tenant}; kept for the webhook agent in {settings.secrets_file})",
               err=True)  # fmt: skip
