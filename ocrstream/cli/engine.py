"""``ocrstream engine …``: the OCR engine on this machine; each command in its own module."""

from __future__ import annotations

import click

from ocrstream.cli.calibrate import calibrate
from ocrstream.cli.quantize import quantize


@click.group()
def engine() -> None:
    """The OCR engine on this machine: its backend choice and its models."""


engine.add_command(calibrate)
engine.add_command(quantize)
