"""``ocrstream topics create|list``: the topics of docs/architecture.md ("Topics") on the
configured cluster."""

from __future__ import annotations

import click

from ocrstream.errors import OcrstreamError
from ocrstream.settings import KafkaSettings
from ocrstream.streams.topics import ensure_topics, list_topics


@click.group()
def topics() -> None:
    """Kafka topics (names carry OCRSTREAM_TOPIC_PREFIX)."""


@topics.command("create")
@click.option(
    "--partitions-scale",
    type=click.FloatRange(min=0.0, min_open=True),
    default=1.0,
    show_default=True,
    envvar="OCRSTREAM_TOPICS_PARTITIONS_SCALE",
    help="Multiply the design's partition counts (e.g. 0.25 on a laptop); rounded up, at least 1.",
)
@click.option(
    "--partitions",
    "partitions",
    type=click.IntRange(min=1),
    default=None,
    help="One partition count for every topic (overrides --partitions-scale).",
)
@click.option(
    "--replication-factor",
    type=int,
    default=1,
    show_default=True,
    envvar="OCRSTREAM_TOPICS_REPLICATION_FACTOR",
    help="Replicas per partition; -1 lets the broker choose.",
)
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per admin request.")
def create(
    partitions_scale: float, partitions: int | None, replication_factor: int, timeout: float
) -> None:
    """Create missing topics; report existing ones whose settings differ (never alters them)."""
    kafka = KafkaSettings()
    try:
        report = ensure_topics(
            kafka,
            partitions,
            replication_factor,
            partitions_scale=partitions_scale,
            timeout_s=timeout,
        )
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    for name in report.created:
        click.echo(f"created  {name}")
    for name in report.existing:
        click.echo(f"exists   {name}")
    for diff in report.differing:
        click.echo(f"differs  {diff}")
    click.echo(
        f"{len(report.created)} created, {len(report.existing)} as specified, "
        f"{len(report.differing_topics)} differing"
    )


@topics.command("list")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per admin request.")
def list_cmd(timeout: float) -> None:
    """Topics under the prefix with partitions, cleanup policy and retention."""
    kafka = KafkaSettings()
    try:
        infos = list_topics(kafka, timeout_s=timeout)
    except OcrstreamError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{'TOPIC':<40} {'PARTS':>5}  {'CLEANUP':<15} RETENTION")
    for info in infos:
        retention = info.configs.get("retention.ms", "-")
        if retention.lstrip("-").isdigit() and int(retention) > 0:
            retention = f"{int(retention) / 86_400_000:g}d"
        click.echo(
            f"{info.name:<40} {info.partitions:>5}  "
            f"{info.configs.get('cleanup.policy', '-'):<15} {retention}"
        )
