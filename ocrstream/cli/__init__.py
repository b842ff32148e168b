"""The ``ocrstream`` console script.

Each subcommand lives in its own module and is imported only when it is run, so
``ocrstream infra up`` never pays for loading the OCR models and vice versa.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys

import click

from ocrstream import __version__

_COMMANDS: dict[str, tuple[str, str]] = {
    "ocr": ("ocrstream.cli.ocr", "ocr"),
    "infra": ("ocrstream.cli.infra", "infra"),
    "topics": ("ocrstream.cli.topics", "topics"),
    "splitter": ("ocrstream.cli.agents", "splitter"),
    "ocr-worker": ("ocrstream.cli.agents", "ocr_worker"),
    "assembler": ("ocrstream.cli.agents", "assembler"),
    "lag-exporter": ("ocrstream.cli.agents", "lag_exporter"),
    "all": ("ocrstream.cli.agents", "all_agents"),
    "submit": ("ocrstream.cli.client", "submit"),
    "run": ("ocrstream.cli.client", "run"),
    "results": ("ocrstream.cli.client", "results"),
    "scale": ("ocrstream.cli.scale", "scale"),
    "bench": ("ocrstream.cli.bench", "bench"),
    "api": ("ocrstream.cli.api", "api"),
    "dlq": ("ocrstream.cli.dlq", "dlq"),
    "reprocess": ("ocrstream.cli.reprocess", "reprocess"),
    "webhooks": ("ocrstream.cli.agents", "webhooks"),
    "shadow": ("ocrstream.cli.shadow", "shadow"),
    "engine": ("ocrstream.cli.engine", "engine"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == module_name:
                return None
            raise
        command: click.Command = getattr(module, attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ocrstream")
@click.option("--log-level", default="INFO", show_default=True, envvar="OCRSTREAM_LOG_LEVEL")
@click.option(
    "--log-json/--no-log-json",
    default=False,
    envvar="OCRSTREAM_LOG_JSON",
    help="Log JSON lines (for ELK/Loki) instead of text.",
)
def main(log_level: str, log_json: bool) -> None:
    """ocrstream: OCR of scanned documents at scale on Kafka and S3."""
    from ocrstream.logs import configure_logging

    configure_logging(level=log_level, json_lines=log_json)


_quick_exit = False


def allow_quick_exit() -> None:
    """Called by a command that has written all its output and holds nothing that must be
    released on the way out (no broker client, no temporary files): when it runs as the
    console script, the process then ends without the interpreter's teardown of every module
    and of the inference runtimes' compiled models and threads. That teardown is about 0.1 s of
    a one-page ``ocrstream ocr`` (1.5 s on a 2-vCPU Zen 4; docs/benchmarks.md, session 34)."""
    global _quick_exit
    _quick_exit = True


def entry() -> None:
    """The ``ocrstream`` console script (and ``python -m ocrstream``): :func:`main`, then the
    quick exit where the command allowed it. Tests that invoke :func:`main` in-process never
    take it."""
    try:
        main(prog_name="ocrstream")
    except SystemExit as e:
        if not _quick_exit or not (e.code is None or isinstance(e.code, int)):
            raise
        code = e.code or 0
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: what Python itself reports
                code = code or 120
        with contextlib.suppress(Exception):
            logging.shutdown()
        os._exit(code)
