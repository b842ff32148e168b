"""``ocrstream infra up|down|status``: Kafka, the S3 store and Prometheus on this machine."""

from __future__ import annotations

import shutil
import sys
import time

import click

from ocrstream.services import (
    SERVICE_NAMES,
    ServiceError,
    State,
    Status,
    UpResult,
    build_services,
    down,
    status,
    up,
)
from ocrstream.settings import S3Settings, ServicesSettings

_SERVICE_ARG = click.argument(
    "names", nargs=-1, type=click.Choice(SERVICE_NAMES), metavar="[SERVICE]..."
)


@click.group()
def infra() -> None:
    """Local services without Docker (state under OCRSTREAM_INFRA_HOME, default .infra/)."""


@infra.command("up")
@_SERVICE_ARG
def up_cmd(names: tuple[str, ...]) -> None:
    """Start the services (all by default) and wait until each answers. Idempotent."""
    settings = ServicesSettings()
    t0 = time.monotonic()

    def report(result: UpResult) -> None:
        verb = "started" if result.started else "already up"
        click.echo(
            f"{result.name:<11} {verb:<11} pid {result.pid}  {result.address}  "
            f"({result.seconds:.1f}s)"
        )

    try:
        up(build_services(settings, S3Settings(), names), report=report)
    except ServiceError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"services up in {time.monotonic() - t0:.1f}s (home {settings.home})")


@infra.command("down")
@_SERVICE_ARG
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    help="Seconds to wait after SIGTERM before SIGKILL.",
)
@click.option("--wipe", is_flag=True, help="Also delete the services' data (the home folder).")
def down_cmd(names: tuple[str, ...], timeout: float, wipe: bool) -> None:
    """Stop the services we started (all by default)."""
    settings = ServicesSettings()
    try:
        stopped = down(build_services(settings, S3Settings(), names), timeout_s=timeout)
    except ServiceError as e:
        raise click.ClickException(str(e)) from e
    for name, pid in stopped:
        click.echo(f"{name:<11} {'stopped pid ' + str(pid) if pid else 'not running'}")
    if wipe:
        if not (settings.home / "run").is_dir():
            raise click.ClickException(f"{settings.home} does not look like an infra home")
        if names:
            for name in names:
                shutil.rmtree(settings.home / name, ignore_errors=True)
                if name == "s3":
                    shutil.rmtree(settings.home / "s3data", ignore_errors=True)
        else:
            shutil.rmtree(settings.home, ignore_errors=True)
        click.echo(f"wiped {settings.home}" + (f" ({', '.join(names)})" if names else ""))


def _format(st: Status) -> str:
    pid = str(st.pid) if st.pid else "-"
    line = f"{st.name:<11} {st.state.value:<9} {pid:>8}  {st.address}"
    return f"{line}  ({st.detail})" if st.detail else line


@infra.command("status")
@_SERVICE_ARG
@click.option(
    "--quiet", "-q", is_flag=True, help="Print nothing; exit 0 only if every service answers."
)
def status_cmd(names: tuple[str, ...], quiet: bool) -> None:
    """Each service's state, PID and address. Exit 1 when any is not up."""
    settings = ServicesSettings()
    statuses = status(build_services(settings, S3Settings(), names))
    if not quiet:
        click.echo(f"{'SERVICE':<11} {'STATE':<9} {'PID':>8}  ADDRESS")
        for st in statuses:
            click.echo(_format(st))
        click.echo(f"home {settings.home}")
    sys.exit(0 if all(st.state is State.UP for st in statuses) else 1)
