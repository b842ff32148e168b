"""``ocrstream engine quantize``: build the int8 profile's models ahead of time."""

from __future__ import annotations

import time

import click


@click.command()
@click.option(
    "--model",
    "models",
    multiple=True,
    help="Model set (repeatable; default OCRSTREAM_OCR_MODEL).",
)
def quantize(models: tuple[str, ...]) -> None:
    """Build the int8 profile's INT8 models (OCRSTREAM_OCR_PRECISION=int8: det, and rec where
    INT8 holds its accuracy) into the engine cache: NNCF post-training quantisation, calibrated
    on the dev split of the engine's development sets. Models already there are kept; prints
    each model's path."""
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.processors.ocr.quantize import CALIBRATION
    from ocrstream.settings import OcrSettings

    base = OcrSettings()
    for name in models or (base.model,):
        settings = base.model_copy(update={"model": name, "precision": "int8"})
        start = time.perf_counter()
        engine = OcrEngine(settings)  # builds what is missing, under the cache's build lock
        engine.close()
        if not engine.int8_models:
            click.echo(f"{name}: nothing to build: the int8 profile runs it in fp32 "
                       "(INT8 did not pay for it: docs/benchmarks.md)")  # fmt: skip
            continue
        click.echo(
            f"{name}: int8 models ready in {time.perf_counter() - start:.1f} s "
            f"(calibration: {CALIBRATION.identity})"
        )
        for kind, path in sorted(engine.int8_models.items()):
            click.echo(f"  {kind}\t{path}")
