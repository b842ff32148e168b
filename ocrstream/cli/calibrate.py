"""``ocrstream engine calibrate``: measure again which CPU backend ``auto`` takes for det and
rec on this machine (:mod:`ocrstream.processors.ocr.backends.choice`), keep the result in the
engine cache for the next engines, and print the times. (A command of the ``engine`` group,
:mod:`ocrstream.cli.engine`.)"""

from __future__ import annotations

import sys

import click

from ocrstream.errors import OcrstreamError
from ocrstream.settings import OcrBackend, OcrSettings


@click.command("calibrate")
@click.option("--model", default=None, help="Model set [OCRSTREAM_OCR_MODEL].")
@click.option("--threads", type=int, default=None, help="Engine threads [OCRSTREAM_OCR_THREADS].")
@click.option(
    "--precision",
    type=click.Choice(["fp16", "fp32"]),
    default=None,
    help="fp16: OpenVINO in bf16 races too where the CPU has bf16; fp32: the fp32 runtimes "
    "alone, as engines run with OCRSTREAM_OCR_PRECISION=fp32 [OCRSTREAM_OCR_PRECISION, else "
    "fp16].",
)
def calibrate(model: str | None, threads: int | None, precision: str | None) -> None:
    """Time det and rec on each installed CPU backend and keep the faster per stage for
    ``auto`` (engines started later on this machine with the same threads, models and
    precision)."""
    from ocrstream.processors.ocr.backends.choice import (
        AGREE,
        NEW_SHAPE_WEIGHT,
        REFERENCE,
        choose,
        installed,
    )
    from ocrstream.processors.ocr.models import load_model_set

    given = {"model": model, "threads": threads, "precision": precision}
    update = {k: v for k, v in given.items() if v is not None}
    settings = OcrSettings().model_copy(update=update)
    if not settings.on_cpu:
        raise click.UsageError(f"auto is measured on the CPU only, not on {settings.device!r}")
    candidates = installed()
    if len(candidates) < 2:
        click.echo(f"only {', '.join(candidates) or 'no CPU backend'} installed: nothing to choose")
        return
    try:
        found = choose(settings, load_model_set(settings.model, settings.model_dir), remeasure=True)
    except OcrstreamError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    m = found.machine
    versions = ", ".join(f"{k} {v}" for k, v in m["backends"].items())
    click.echo(f"CPU {m['cpu']} ({m['arch']}), {m['threads']} threads; {versions}")
    click.echo(
        f"model {settings.model}, precision {settings.precision}, generated input; ms: the best "
        "warm run plus the mean run of shapes met for the first time (in brackets), that run "
        "weighed " + ", ".join(f"{stage} x{w:g}" for stage, w in NEW_SHAPE_WEIGHT.items())
    )
    rows = [*found.seconds.values(), *found.refused.values()]
    columns = list(dict.fromkeys(k for times in rows for k in times))
    click.echo("stage  " + "".join(f"{k:>15}" for k in columns) + "  auto")
    for stage, chosen in found.stages.items():
        row, fresh = found.seconds[stage], found.new_shape_seconds.get(stage, {})
        refused = found.refused.get(stage, {})
        times = "".join(f"{_cell(k, row, fresh, refused):>15}" for k in columns)
        click.echo(f"{stage:<7}{times}  {chosen}")
    click.echo(f"measured in {found.took_s:.1f} s; kept in {found.path}")
    if any(found.refused.values()):
        click.echo(
            f"wrong N%: read text as {REFERENCE} does on N% of it, under the "
            + ", ".join(f"{stage} {v:.0%}" for stage, v in AGREE.items())
            + " needed: not timed, not used (a runtime that computes wrong on this CPU)"
        )
    if OcrBackend(settings.backend) is not OcrBackend.AUTO:
        click.echo(f"note: OCRSTREAM_OCR_BACKEND={settings.backend.value} overrides this choice")


def _cell(
    key: str, seconds: dict[str, float], new: dict[str, float], refused: dict[str, float]
) -> str:
    """``total (new)`` in ms, the total alone when the part is not known, ``wrong N%`` for a
    candidate refused for its reading, ``-`` for one not offered."""
    if key in refused:
        return f"wrong {refused[key]:.0%}"
    if key not in seconds:
        return "-"
    part = new.get(key)
    return f"{seconds[key] * 1000:.0f}" + (f" ({part * 1000:.0f})" if part is not None else "")
