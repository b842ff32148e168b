"""``ocrstream bench stages``: where the engine's time goes per CPU backend, stage and threads.

For each thread count, one engine per backend (forced: ``OCRSTREAM_OCR_BACKEND``) is loaded in
this process and warmed up on the first page; then every page is read by each engine in turn,
the order alternating page by page, so a change of load on a shared machine falls on all of
them alike. Reported per data set, thread count and backend: det and rec ms per page (the
engine's own ``timings_ms``: a stage's preprocessing, inference and postprocessing), the
whole call's wall time per page, and nCER against the ground truth (the same pages read the
same on both backends within a few edits). Beside them, what ``auto`` measures on its
generated input for the same thread count (:mod:`ocrstream.processors.ocr.backends.choice`,
measured again), so the two can be compared. One page per engine call, as a worker with
``OCRSTREAM_WORKER_MAX_BATCH=1``; batching across pages is ``bench engine``'s business.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from ocrstream.bench.cer import CerCounts, TextLine, page_cer
from ocrstream.bench.datasets import Sample

Echo = Callable[[str], None]


@dataclass(slots=True)
class StageRow:
    dataset: str
    threads: int
    backend: str
    pages: int = 0
    det_ms: float = 0.0
    rec_ms: float = 0.0
    wall_ms: float = 0.0
    counts: CerCounts = field(default_factory=CerCounts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        n = max(1, self.pages)
        out.update(det_ms=round(self.det_ms / n, 1), rec_ms=round(self.rec_ms / n, 1),
                   wall_ms=round(self.wall_ms / n, 1), ncer=round(self.counts.cer, 5))  # fmt: skip
        return out


def cpu_name() -> str:
    from ocrstream.bench.engine import machine

    return str(machine()["cpu"])


def measure(
    sets: dict[str, list[Sample]],
    threads: Sequence[int],
    backends: Sequence[str],
    model: str,
    echo: Echo = print,
) -> tuple[list[StageRow], dict[int, dict[str, Any]]]:
    """The rows (see the module docstring) and, per thread count, ``auto``'s own measurement."""
    from ocrstream.processors.ocr.backends.choice import choose
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.settings import OcrSettings

    rows: list[StageRow] = []
    auto: dict[int, dict[str, Any]] = {}
    first = next(s for samples in sets.values() for s in samples)
    for t in threads:
        engines = {b: OcrEngine(OcrSettings(backend=b, threads=t, model=model)) for b in backends}
        found = choose(OcrSettings(threads=t, model=model), next(iter(engines.values())).models,
                       remeasure=True)  # fmt: skip
        auto[t] = {"stages": found.stages, "seconds": found.seconds, "took_s": found.took_s}
        for engine in engines.values():
            engine.recognize([first.path.read_bytes()])  # warm-up, not counted
        for name, samples in sets.items():
            mine = {b: StageRow(name, t, b) for b in backends}
            for i, sample in enumerate(samples):
                data = sample.path.read_bytes()
                for b in backends if i % 2 == 0 else list(reversed(backends)):
                    start = time.perf_counter()
                    (page,) = engines[b].recognize([data])
                    row = mine[b]
                    row.wall_ms += (time.perf_counter() - start) * 1000
                    row.pages += 1
                    row.det_ms += page.timings_ms.get("det", 0.0)
                    row.rec_ms += page.timings_ms.get("rec", 0.0)
                    if sample.gt is not None:
                        pred = [TextLine(ln.text, tuple(ln.polygon)) for ln in page.lines]
                        row.counts += page_cer(pred, sample.gt, normalised=True)
            for row in mine.values():
                rows.append(row)
                d = row.to_dict()
                times = f"det {d['det_ms']} ms, rec {d['rec_ms']} ms, wall {d['wall_ms']} ms/page"
                echo(f"{name} threads={t} {row.backend}: {times}, nCER {d['ncer']}")
        for engine in engines.values():
            engine.close()
        del engines
    return rows, auto


def report(rows: list[StageRow], auto: dict[int, dict[str, Any]], backends: Sequence[str]) -> str:
    """A Markdown table: per data set and threads, each backend's det / rec / wall ms per page."""
    heads = " | ".join(f"{b} det / rec / page ms" for b in backends)
    out = [
        f"| pages | threads | {heads} | faster det, rec | auto (generated input) |",
        "| --- | ---: | " + " | ".join("---:" for _ in backends) + " | --- | --- |",
    ]
    keys = dict.fromkeys((r.dataset, r.threads) for r in rows)
    for dataset, t in keys:
        mine = {r.backend: r.to_dict() for r in rows if (r.dataset, r.threads) == (dataset, t)}
        cells = [f"{mine[b]['det_ms']:.0f} / {mine[b]['rec_ms']:.0f} / {mine[b]['wall_ms']:.0f}"
                 for b in backends]  # fmt: skip
        det = min(backends, key=lambda b: mine[b]["det_ms"])
        rec = min(backends, key=lambda b: mine[b]["rec_ms"])
        chosen = auto.get(t, {}).get("stages", {})
        pages = next(iter(mine.values()))["pages"]
        out.append(f"| {dataset} ({pages}) | {t} | " + " | ".join(cells)
                   + f" | {det}, {rec} | {chosen.get('det')}, {chosen.get('rec')} |")  # fmt: skip
    return "\n".join(out)


@click.command()
@click.option("--dataset", "datasets", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="SROIE layout or a folder of images; repeatable.")  # fmt: skip
@click.option("--devset", "devsets", multiple=True, help="A generated dev set (bench engine's).")
@click.option("--devset-pages", type=int, default=4, show_default=True)
@click.option("--split", default="heldout", show_default=True)
@click.option("--limit", type=int, default=None, help="At most N pages per --dataset.")
@click.option("--threads", "threads", default="1,2", show_default=True, help="Comma-separated.")
@click.option("--backends", default="openvino,onnxruntime", show_default=True)
@click.option("--model", default="ppocrv6-small", show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def stages(
    datasets: tuple[Path, ...],
    devsets: tuple[str, ...],
    devset_pages: int,
    split: str,
    limit: int | None,
    threads: str,
    backends: str,
    model: str,
    json_out: Path | None,
) -> None:
    """Det and rec time per page on each CPU backend at each thread count (interleaved)."""
    from ocrstream.bench.datasets import load_dataset, subset
    from ocrstream.bench.devsets import all_devsets

    sets: dict[str, list[Sample]] = {}
    for name, samples in all_devsets(devsets, devset_pages, split).items():
        sets[name] = samples
    for root in datasets:
        sets[root.name] = subset(load_dataset(root), limit)
    if not sets:
        raise click.UsageError("give --dataset or --devset")
    counts = [int(t) for t in threads.split(",") if t.strip()]
    names = [b.strip() for b in backends.split(",") if b.strip()]
    load = os.getloadavg()
    click.echo(f"CPU {cpu_name()} ({platform.machine()}), {os.cpu_count()} cores, "
               f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")  # fmt: skip
    start = time.time()
    rows, auto = measure(sets, counts, names, model, echo=click.echo)
    end_load = os.getloadavg()
    click.echo(report(rows, auto, names))
    click.echo(f"took {time.time() - start:.0f} s; load average at the end {end_load[0]:.1f}")
    if json_out is not None:
        body = {"cpu": cpu_name(), "load_start": load, "load_end": end_load, "model": model,
                "rows": [r.to_dict() for r in rows], "auto": auto}  # fmt: skip
        json_out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
