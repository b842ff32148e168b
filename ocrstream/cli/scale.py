"""``ocrstream scale``: run OCR workers between a minimum and a maximum, following lag."""

from __future__ import annotations

import click


@click.command()
@click.option("--min", "min_replicas", type=int, default=None, help="Fewest workers.")
@click.option("--max", "max_replicas", type=int, default=None, help="Most workers.")
@click.option(
    "--lag-threshold",
    type=int,
    default=None,
    help="Pages of lag one worker is expected to absorb (KEDA lagThreshold).",
)
@click.option(
    "--activation",
    type=int,
    default=None,
    help="Lag at or under which the scaler is inactive (activationLagThreshold).",
)
@click.option("--cooldown", type=float, default=None, help="Seconds before going to --min.")
@click.option(
    "--stabilization", type=float, default=None, help="Scale-down stabilisation window in seconds."
)
@click.option("--interval", type=float, default=None, help="Seconds between decisions.")
@click.option("--metrics-port", type=int, default=None)
def scale(
    min_replicas: int | None,
    max_replicas: int | None,
    lag_threshold: int | None,
    activation: int | None,
    cooldown: float | None,
    stabilization: float | None,
    interval: float | None,
    metrics_port: int | None,
) -> None:
    """Supervise OCR worker processes, scaled on the lag of ocr.pages.v1 like KEDA does."""
    from ocrstream.cli.agents import _stop_on_signals
    from ocrstream.errors import RetriableError
    from ocrstream.processors.autoscale import Autoscaler, ScalePolicy
    from ocrstream.settings import KafkaSettings, ScaleSettings, WorkerSettings
    from ocrstream.streams.autoscaler import GroupLag, LocalAutoscaler, spawn_worker
    from ocrstream.streams.metrics import process_metrics, serve

    overrides: dict[str, object] = {
        "min_replicas": min_replicas, "max_replicas": max_replicas,
        "lag_threshold": lag_threshold, "activation_lag_threshold": activation,
        "cooldown_s": cooldown, "stabilization_window_s": stabilization,
        "interval_s": interval, "metrics_port": metrics_port,
    }  # fmt: skip
    defaults = ScaleSettings()
    settings = defaults.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    kafka, worker = KafkaSettings(), WorkerSettings()
    serve(settings.metrics_port)
    # The workers' group id carries the topic prefix (``streams.worker.consumer_config``).
    lag = GroupLag(kafka, kafka.topic(worker.group), kafka.topic("ocr.pages.v1"))
    try:
        partitions = lag.partitions()
    except RetriableError as e:
        raise click.ClickException(f"cannot read ocr.pages.v1: {e}") from e
    policy = ScalePolicy(
        min_replicas=settings.min_replicas,
        max_replicas=settings.max_replicas,
        lag_threshold=settings.lag_threshold,
        activation_lag_threshold=settings.activation_lag_threshold,
        cooldown_s=settings.cooldown_s,
        stabilization_window_s=settings.stabilization_window_s,
        partitions=partitions,
    )
    scaler = LocalAutoscaler(
        Autoscaler(policy), lag.read, spawn_worker(worker.metrics_port), process_metrics(),
        interval_s=settings.interval_s,
    )  # fmt: skip
    try:
        scaler.run(_stop_on_signals())
    finally:
        lag.close()
