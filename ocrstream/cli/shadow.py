"""``ocrstream shadow compare|report``: how a shadow worker's candidate engine agrees with the
primary pool (docs/architecture.md, "Worker pools")."""

from __future__ import annotations

import json
import math

import click

from ocrstream.cli.dlq import _since


@click.group()
def shadow() -> None:
    """Shadow workers: their results against the primary's."""


@shadow.command()
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve /metrics here (0: off; default OCRSTREAM_SHADOW_METRICS_PORT).",
)
def compare(metrics_port: int | None) -> None:
    """The comparer agent: pairs primary and shadow page results and exports per page the CER
    between them and the confidence delta (ocrstream_shadow_cer, …_confidence_delta)."""
    from ocrstream.cli.agents import _stop_on_signals
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings, ShadowSettings
    from ocrstream.streams.metrics import process_metrics, serve
    from ocrstream.streams.shadow import ShadowComparer

    settings, kafka = ShadowSettings(), KafkaSettings()
    metrics = process_metrics()
    serve(settings.metrics_port if metrics_port is None else metrics_port)
    ShadowComparer(kafka, settings, Codec(kafka), metrics).run(_stop_on_signals())


@shadow.command()
@click.option("--since", default=None, help="Only results written since: an ISO time or 2h.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def report(since: str | None, as_json: bool) -> None:
    """Pages compared, the CER of the shadow's text against the primary's (mean and
    percentiles) and the confidence delta, from the result topics as they are now."""
    from ocrstream.processors.shadow import summarise
    from ocrstream.schemas.codec import Codec
    from ocrstream.settings import KafkaSettings
    from ocrstream.streams.shadow import comparisons

    kafka = KafkaSettings()
    summary = summarise(comparisons(kafka, Codec(kafka), _since(since)))
    if as_json:
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                 for k, v in summary.items()}  # fmt: skip
        click.echo(json.dumps(clean, indent=2))
        return
    if not summary["pages"]:
        click.echo("no page was answered by both the primary and a shadow worker")
        return
    s = summary
    cer = "  ".join(f"{k} {s[f'cer_{k}']:.4f}" for k in ("mean", "p50", "p90", "p99", "max"))
    delta = "  ".join(f"{k} {s[f'confidence_delta_{k}']:+.4f}" for k in ("mean", "p10", "p90"))
    click.echo(f"pages compared      {s['pages']}  ({s['pages_differing']} with any difference)")
    click.echo(f"CER shadow/primary  {cer}")
    click.echo(f"confidence delta    {delta}")
