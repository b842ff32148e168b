"""``ocrstream bench pipeline``: pages/s through Kafka against the engine alone, latency, memory.

One run, in order:

1. Local services up (unless ``--no-infra``); topics under a fresh prefix ``bench-…`` and a
   fresh bucket, so the run sees no one else's records and leaves nothing behind.
2. Page images (synthetic A4 pages with known text, or a dataset's images), one distinct file
   per page, put into scanned PDFs (one full-page JPEG per page: the splitter passes each image
   through unchanged, so the workers get exactly these files).
3. The agents as supervised processes, as ``ocrstream all`` runs them: splitter, assembler,
   lag exporter and ``--workers`` OCR workers, or the local autoscaler (``ocrstream scale``)
   between ``--min`` and ``--max``. They serve metrics on the fixed ports Prometheus scrapes,
   under a lock, so the dashboards show the run.
4. A one-page warm-up document (models loaded, faust tables assigned; not measured).
5. The latency probe: ``--latency-probe K`` one-page documents, one at a time at idle;
   end-to-end latency from the ScanSubmitted's ``submitted_at`` to the DocumentEvent's
   ``completed_at``.
6. The load: ``--documents N`` documents of ``--pages-per-doc P`` pages submitted at once.
   Throughput = pages / (last ``completed_at`` − first submission). Document latency
   percentiles. Meanwhile a timeline (:mod:`ocrstream.bench.timeline`) samples page results,
   the worker group's lag and its members every second (``--plot``).
7. The zero-loss check: ``ocr.documents.v1`` read from the beginning holds exactly one
   terminal event per submitted doc_id, completed documents have every page, and nothing was
   dead-lettered.
8. Agents stopped; ``bench engine``'s runner on the SAME page files, in as many processes as
   there were workers, with the same engine settings, threads and batch size (the workers'
   ``max_batch``) — and on the probe pages one at a time, for the engine's share of latency.
   Ratio = pipeline pages/s / engine pages/s.
9. ``--splitter-rss-pages N``: a scanned PDF of N pages split by ``iter_pages`` in a fresh
   process; its peak RSS (VmHWM).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from ocrstream.bench.pipeline_run import PipelineBench, PipelineConfig


def format_report(r: dict[str, Any]) -> str:
    """The human summary of a report (what the command prints)."""
    rows = [f"== ocrstream bench pipeline ({r['run_id']})"]
    pipe, eng = r.get("pipeline"), r.get("engine")
    if pipe:
        lat = pipe["latency_s"]
        rows += [
            f"documents        {pipe['finished']}/{pipe['documents']} finished "
            f"{pipe['statuses']}, {pipe['pages']} pages",
            f"wall time        {pipe['wall_s']:.1f} s (first submission to last terminal event)",
            f"throughput       {pipe['pages_per_s']:.3f} pages/s through Kafka "
            f"(workers seen: {pipe['max_workers_seen']})",
            f"doc latency      p50 {lat.get('p50', 0):.2f} s, p95 {lat.get('p95', 0):.2f} s, "
            f"p99 {lat.get('p99', 0):.2f} s, max {lat.get('max', 0):.2f} s",
        ]
    if eng:
        rows.append(f"engine alone     {eng['pages_per_s']:.3f} pages/s ({eng['setup']}, "
                    f"{eng['pages']} pages in {eng['wall_s']:.1f} s)")  # fmt: skip
    if "ratio" in r:
        verdict = "meets" if r["ratio"] >= 0.9 else "below"
        rows.append(f"pipeline/engine  {r['ratio']:.1%} ({verdict} the 90% target)")
    loss = r.get("zero_loss")
    if loss:
        state = "OK" if loss["ok"] else "FAILED"
        detail = {k: v for k, v in loss.items() if v and k not in ("ok", "documents",
                                                                   "terminal_events")}  # fmt: skip
        rows.append(f"zero loss        {state}: {loss['terminal_events']} terminal events for "
                    f"{loss['documents']} documents {detail or ''}")  # fmt: skip
    probe = r.get("latency_probe")
    if probe:
        s = probe["summary"]
        line = (f"1-page latency   p50 {s['p50']:.2f} s, max {s['max']:.2f} s over "
                f"{probe['documents']} at idle (target ≤ 1 s)")  # fmt: skip
        if probe.get("overhead_s"):
            eng_s, over = probe["engine_s"], probe["overhead_s"]
            line += (f"; of which the engine p50 {eng_s['p50']:.2f} s, the pipeline "
                     f"p50 {over['p50']:.2f} s (max {over['max']:.2f} s)")  # fmt: skip
        if probe.get("idle_before_last_s") and probe.get("latency_s"):
            line += (f"; the last, after {probe['idle_before_last_s']:.0f} s idle, "
                     f"{probe['latency_s'][-1]:.2f} s")  # fmt: skip
        rows.append(line)
    rss = r.get("splitter_rss")
    if rss:
        rows.append(f"splitter RSS     peak {rss['peak_mb']:.0f} MB (before the split "
                    f"{rss['base_mb']:.0f} MB) on {rss['pages']} pages, "
                    f"{rss['passthrough']} passed through (target ≤ 500 MB)")  # fmt: skip
    return "\n".join(rows)


_OPTIONS = [
    click.option("--documents", type=click.IntRange(min=1), default=20, show_default=True),
    click.option("--pages-per-doc", type=click.IntRange(min=1), default=3, show_default=True),
    click.option("--dataset", type=click.Path(exists=True, file_okay=False, path_type=Path),
                 help="Page images from a folder (SROIE layout or plain images)."),
    click.option("--synthetic", is_flag=True,
                 help="Synthetic A4 pages with known text (the default without --dataset)."),
    click.option("--dpi", type=click.IntRange(min=50), default=200, show_default=True,
                 help="Resolution of the synthetic pages."),
    click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                 help="OCR worker processes (without --autoscale)."),
    click.option("--autoscale", is_flag=True, help="Run `ocrstream scale` instead of --workers."),
    click.option("--min", "min_workers", type=click.IntRange(min=0), default=1, show_default=True),
    click.option("--max", "max_workers", type=click.IntRange(min=1), default=2, show_default=True),
    click.option("--lag-threshold", type=click.IntRange(min=1), default=20, show_default=True),
    click.option("--cooldown", type=float, default=30.0, show_default=True,
                 help="Autoscaler cooldown, seconds."),
    click.option("--stabilization", type=float, default=30.0, show_default=True,
                 help="Autoscaler scale-down stabilisation window, seconds."),
    click.option("--latency-probe", type=click.IntRange(min=0), default=5, show_default=True,
                 help="One-page documents sent one at a time at idle."),
    click.option("--idle-probe", "idle_probe", type=click.FloatRange(min=0), default=40.0,
                 show_default=True,
                 help="Seconds the last probe document waits first, the pipeline idle "
                      "(longer than OCRSTREAM_KAFKA_FETCH_STALL_S); 0: 1 s as the others."),
    click.option("--splitter-rss-pages", type=click.IntRange(min=0), default=0,
                 help="Also the splitter's peak RSS on a scan of this many pages (e.g. 2000)."),
    click.option("--engine/--no-engine", default=True, show_default=True,
                 help="Compare with the engine alone on the same pages."),
    click.option("--partitions-scale", type=float, default=0.25, show_default=True,
                 help="Partitions of the bench's topics: architecture.md's counts times this."),
    click.option("--timeout", type=float, default=3600.0, show_default=True,
                 help="Seconds to wait for the load's documents."),
    click.option("--tail", type=float, default=120.0, show_default=True,
                 help="With --autoscale: seconds to keep watching for the scale-down."),
    click.option("--no-infra", is_flag=True, help="Don't start local services."),
    click.option("--no-metrics-ports", is_flag=True,
                 help="Agents serve no /metrics (and take no lock on the fixed ports)."),
    click.option("--keep", is_flag=True, help="Keep the bench's topics and bucket."),
    click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
                 help="Where pages, PDFs and the agents' log go [a temporary folder]."),
    click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
                 help="PNG of throughput, lag and worker count over time."),
    click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path)),
]  # fmt: skip


def _options(f: Any) -> Any:
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


@click.command()
@_options
def pipeline(
    documents: int, pages_per_doc: int, dataset: Path | None, synthetic: bool, dpi: int,
    workers: int, autoscale: bool, min_workers: int, max_workers: int, lag_threshold: int,
    cooldown: float, stabilization: float, latency_probe: int, idle_probe: float,
    splitter_rss_pages: int, engine: bool, partitions_scale: float, timeout: float,
    tail: float, no_infra: bool, no_metrics_ports: bool, keep: bool, workdir: Path | None,
    plot: Path | None, json_out: Path | None,
) -> None:  # fmt: skip
    """Pages/s through Kafka against the engine alone, latency, zero loss, splitter memory."""
    from ocrstream.cli.bench import _command_line

    if dataset is not None and synthetic:
        raise click.UsageError("--dataset and --synthetic exclude each other")
    if autoscale and min_workers > max_workers:
        raise click.UsageError("--min must not exceed --max")
    cfg = PipelineConfig(
        documents=documents, pages_per_doc=pages_per_doc, dataset=dataset, dpi=dpi,
        workers=workers, autoscale=autoscale, min_workers=min_workers, max_workers=max_workers,
        lag_threshold=lag_threshold, cooldown_s=cooldown, stabilization_s=stabilization,
        latency_probe=latency_probe, idle_probe_s=idle_probe,
        splitter_rss_pages=splitter_rss_pages, engine=engine,
        partitions_scale=partitions_scale, timeout_s=timeout, tail_s=tail,
        infra=not no_infra, metrics_ports=not no_metrics_ports, keep=keep,
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="ocrstream-bench-pipeline-")))  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)

        def echo(text: str) -> None:
            click.echo(text, err=True)

        bench = PipelineBench(cfg, workdir, echo)
        try:
            report = bench.run()
        except (TimeoutError, RuntimeError) as e:
            if bench.report:
                _write(bench.report, json_out, plot, cfg)
            raise click.ClickException(str(e)) from e
        report["command"] = _command_line(click.get_current_context())
        click.echo(format_report(report))
        _write(report, json_out, plot, cfg)
        if not report.get("zero_loss", {}).get("ok", False):
            raise click.ClickException("the zero-loss check failed")


def _write(report: dict[str, Any], json_out: Path | None, plot: Path | None,
           cfg: PipelineConfig) -> None:  # fmt: skip
    pipe = report.get("pipeline")
    if plot is not None and pipe:
        from ocrstream.bench.plot import plot_timeline
        from ocrstream.bench.timeline import Point

        mode = f"{cfg.workers} worker(s)"
        if cfg.autoscale:
            mode = f"autoscale {cfg.min_workers}..{cfg.max_workers}, threshold {cfg.lag_threshold}"
        title = (f"ocrstream bench pipeline: {pipe['documents']} docs × {cfg.pages_per_doc} "
                 f"pages, {mode}; {pipe['pages_per_s']:.2f} pages/s")  # fmt: skip
        plot_timeline([Point(**p) for p in pipe["timeline"]], plot, title=title,
                      submitted_s=pipe["submit_s"], finished_s=pipe["finished_s"],
                      lag_threshold=cfg.lag_threshold if cfg.autoscale else None)  # fmt: skip
        click.echo(f"wrote {plot}", err=True)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        click.echo(f"wrote {json_out}", err=True)
