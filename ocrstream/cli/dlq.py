"""``ocrstream dlq list|show|redrive``: the dead letters, and putting them back once fixed."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

_DURATION = re.compile(r"^(\d+)([smhd])$")


def _since(value: str | None) -> datetime | None:
    """``2026-11-30T12:00:00`` (UTC when no zone), or a duration back from now: ``90m``, ``2d``."""
    if not value:
        return None
    match = _DURATION.match(value)
    if match:
        amount, unit = int(match[1]), match[2]
        seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        return datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise click.BadParameter(f"{value!r}: an ISO time or a duration like 90m, 2d") from e
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _filters(stage: str | None, code: str | None, since: str | None,
             ids: Sequence[str] = ()) -> Any:  # fmt: skip
    from ocrstream.streams.redrive import Filters

    return Filters(stage=stage, code=code, since=_since(since), ids=tuple(ids))


_FILTER_OPTIONS = [
    click.option("--stage", default=None, help="Only dead letters of this stage."),
    click.option("--code", default=None, help="Only this error code."),
    click.option("--since", default=None, help="Only newer: an ISO time or a duration (2h)."),
]


def _with_filters(fn: Any) -> Any:
    for option in reversed(_FILTER_OPTIONS):
        fn = option(fn)
    return fn


def _context() -> tuple[Any, Any]:
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings

    kafka = KafkaSettings()
    return kafka, Codec(kafka)


@click.group()
def dlq() -> None:
    """The dead-letter topic: list, show, and redrive after the cause is fixed."""


@dlq.command("list")
@_with_filters
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(stage: str | None, code: str | None, since: str | None, as_json: bool) -> None:
    """The dead letters, oldest first per partition, with whether each was redriven."""
    from ocrstream.streams.redrive import dead_letters, redriven

    kafka, codec = _context()
    letters = dead_letters(kafka, codec, _filters(stage, code, since))
    done = redriven(kafka)
    for entry in letters:
        dead = entry.letter
        state = done.get(entry.id, {}).get("state", "")
        if as_json:
            click.echo(json.dumps({"id": entry.id, "failed_at": dead.failed_at.isoformat(),
                                   "stage": dead.stage, "code": dead.error_code,
                                   "origin": f"{dead.topic}[{dead.partition}]@{dead.offset}",
                                   "redriven": state or None}))  # fmt: skip
        else:
            click.echo(f"{entry.id}\t{dead.failed_at:%Y-%m-%d %H:%M:%S}\t{dead.stage}\t"
                       f"{dead.error_code}\t{dead.topic}[{dead.partition}]@{dead.offset}\t"
                       f"{state}\t{dead.error_message[:80]}")  # fmt: skip
    click.echo(f"{len(letters)} dead letters", err=True)


@dlq.command()
@click.argument("dead_letter_id")
def show(dead_letter_id: str) -> None:
    """One dead letter (ID is partition:offset on ocr.dlq.v1) as JSON."""
    from ocrstream.streams.redrive import Filters, dead_letters, redriven

    kafka, codec = _context()
    found = dead_letters(kafka, codec, Filters(ids=(dead_letter_id,)))
    if not found:
        raise click.ClickException(f"no dead letter {dead_letter_id}")
    dead = found[0].letter
    click.echo(json.dumps({
        "id": dead_letter_id, "origin": {"topic": dead.topic, "partition": dead.partition,
                                         "offset": dead.offset},
        "stage": dead.stage, "code": dead.error_code, "message": dead.error_message,
        "failed_at": dead.failed_at.isoformat(),
        "key": dead.key.decode("utf-8", "replace") if dead.key is not None else None,
        "value_bytes": len(dead.value) if dead.value is not None else None,
        "headers": {k: v.decode("utf-8", "replace") for k, v in dead.headers.items()},
        "trace_id": dead.trace_id, "redriven": redriven(kafka).get(dead_letter_id),
    }, indent=2))  # fmt: skip


@dlq.command()
@_with_filters
@click.option("--id", "ids", multiple=True, help="Only these dead letters (repeat).")
@click.option("--dry-run", is_flag=True, help="Say what would be redriven; publish nothing.")
def redrive(stage: str | None, code: str | None, since: str | None, ids: Sequence[str],
            dry_run: bool) -> None:  # fmt: skip
    """Publish the matching dead letters back to their original topics, each at most once."""
    from ocrstream.streams.redrive import dead_letters
    from ocrstream.streams.redrive import redrive as run_redrive

    kafka, codec = _context()
    letters = dead_letters(kafka, codec, _filters(stage, code, since, ids))
    report = run_redrive(kafka, letters, dry_run=dry_run)
    verb = "would redrive" if dry_run else "redriven"
    click.echo(f"{verb}: {len(report.redriven)}; already redriven: {len(report.already)}; "
               f"without a value to publish: {len(report.unusable)}; "
               f"failed: {len(report.failed)}")  # fmt: skip
    for dead_id in report.redriven:
        click.echo(f"  {verb} {dead_id}")
    for dead_id, error in report.failed.items():
        click.echo(f"  failed {dead_id}: {error}")
    if report.failed:
        raise SystemExit(1)
