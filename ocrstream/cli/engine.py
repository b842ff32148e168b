"""``ocrstream engine …``: the OCR engine on this machine; each command in its own module."""

from __future__ import annotations

import click

from ocrstream.cli.calibrate import calibrate


@click.group()
def engine() -> None:
    """The OCR engine on this machine."""


engine.add_command(calibrate)
