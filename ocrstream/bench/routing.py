"""``python -m ocrstream.bench.routing``: tiny-first confidence routing against small-only.

On a mixed set — clean synthetic A4 pages, SROIE receipts and degraded scans of other A4 pages
(:func:`~ocrstream.bench.datasets.degrade`) — every page is read, in one process with the same
threads, by the three engines of the comparison, one after the other:

- ``small``: the default engine (``ppocrv6-small``), the baseline (small-only);
- ``tiny``: the fast primary pool (``ppocrv6-tiny``);
- ``accurate``: the accurate pool's engine (:class:`~ocrstream.settings.AccurateOcrSettings`),
  only for the pages the routing rule (:class:`~ocrstream.settings.RoutingSettings`) finds weak
  in tiny's reading.

Small-only's time is the sum of small's page times; tiny-first's is tiny's on every page plus
accurate's on the routed ones, whose reading replaces tiny's. Interleaving the engines page by
page exposes both setups to the same load on a shared machine. CER is normalised (nCER, see
:mod:`ocrstream.bench.cer`), summed over pages. Decoding is outside the timings (the same for
both). Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ocrstream.bench.cer import CerCounts, TextLine, page_cer
from ocrstream.bench.datasets import degrade, load_sroie, render_a4_page
from ocrstream.bench.engine import machine


@dataclass
class Tally:
    pages: int = 0
    seconds: float = 0.0
    routed: int = 0
    cer: CerCounts = field(default_factory=CerCounts)

    def add(self, seconds: float, counts: CerCounts) -> None:
        self.pages += 1
        self.seconds += seconds
        self.cer.edits += counts.edits
        self.cer.ref_chars += counts.ref_chars

    def row(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "seconds": round(self.seconds, 2),
            "pages_per_s": round(self.pages / self.seconds, 4) if self.seconds else None,
            "ncer": round(self.cer.edits / max(1, self.cer.ref_chars), 4),
            "routed": self.routed,
        }


def mixed_set(a4: int, degraded: int, receipts: int, sroie: Path, dpi: int
              ) -> list[tuple[str, bytes, tuple[TextLine, ...]]]:  # fmt: skip
    pages: list[tuple[str, bytes, tuple[TextLine, ...]]] = []
    for i in range(a4):
        data, gt = render_a4_page(100 + i, dpi=dpi)
        pages.append(("a4", data, gt))
    for i in range(degraded):
        data, gt = render_a4_page(200 + i, dpi=dpi)
        pages.append(("degraded", degrade(data, seed=200 + i), gt))
    for sample in load_sroie(sroie)[:receipts]:
        assert sample.gt is not None
        pages.append(("receipt", sample.path.read_bytes(), sample.gt))
    return pages


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ocrstream.processors.imageio import decode_image
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.processors.routing import RoutingRule
    from ocrstream.settings import AccurateOcrSettings, OcrSettings, RoutingSettings

    threads = args.threads
    small = OcrEngine(OcrSettings(model="ppocrv6-small", threads=threads))
    tiny = OcrEngine(OcrSettings(model="ppocrv6-tiny", threads=threads))
    accurate = OcrEngine(AccurateOcrSettings(threads=threads))
    r = RoutingSettings()
    rules = {"tiny-first": RoutingRule(r.low_confidence, r.max_low_fraction,
                                       r.min_mean_confidence, r.min_lines)}  # fmt: skip
    for spec in args.rule:  # LOW:FRACTION:MEAN, another rule on the same readings
        low, fraction, mean = (float(v) for v in spec.split(":"))
        rules[f"tiny-first[{spec}]"] = RoutingRule(low, fraction, mean, r.min_lines)
    pages = mixed_set(args.a4, args.degraded, args.receipts, args.sroie, args.dpi)
    setups = ("small-only", *rules)
    tallies = {(s, k): Tally() for s in setups for k in ("all", "a4", "degraded", "receipt")}

    def read(engine: OcrEngine, image: Any) -> tuple[float, Any]:
        start = time.perf_counter()
        [page] = engine.recognize([image])
        return time.perf_counter() - start, page

    def lines(page: Any) -> list[TextLine]:
        return [TextLine(ln.text, tuple(map(tuple, ln.polygon))) for ln in page.lines]

    for engine in (small, tiny, accurate):  # warm up: one page each, not timed
        engine.recognize([decode_image(pages[0][1], max_pixels=80_000_000)])
    for n, (kind, data, gt) in enumerate(pages, 1):
        image = decode_image(data, max_pixels=80_000_000)
        t_small, p_small = read(small, image)
        t_tiny, p_tiny = read(tiny, image)
        confidences = [ln.confidence for ln in p_tiny.lines]
        routed = {name: rule.weak(confidences) for name, rule in rules.items()}
        t_acc, p_acc = read(accurate, image) if any(routed.values()) else (0.0, None)
        small_cer = page_cer(lines(p_small), gt, normalised=True)
        for key in ("all", kind):
            tallies[("small-only", key)].add(t_small, small_cer)
            for name, weak in routed.items():
                page = p_acc if weak else p_tiny
                tally = tallies[(name, key)]
                tally.add(t_tiny + (t_acc if weak else 0.0),
                          page_cer(lines(page), gt, normalised=True))  # fmt: skip
                tally.routed += int(weak)
        print(f"{n}/{len(pages)} {kind}: small {t_small:.2f}s, tiny {t_tiny:.2f}s, accurate "
              f"{t_acc:.2f}s, routed by {[k for k, v in routed.items() if v]}",
              flush=True)  # fmt: skip
    report = {
        "command": args.command_line,
        "threads": threads,
        "dpi": args.dpi,
        "rules": {
            name: [r.low_confidence, r.max_low_fraction, r.min_mean_confidence]
            for name, r in rules.items()
        },
        "machine": machine(),
        "results": {f"{s}/{k}": t.row() for (s, k), t in tallies.items()},
    }
    return report


def main(argv: list[str] | None = None) -> None:
    import sys

    parser = argparse.ArgumentParser(prog="python -m ocrstream.bench.routing")
    parser.add_argument("--a4", type=int, default=5, help="clean synthetic A4 pages")
    parser.add_argument("--degraded", type=int, default=5, help="degraded A4 scans")
    parser.add_argument("--receipts", type=int, default=10, help="SROIE receipts")
    parser.add_argument("--sroie", type=Path, default=Path("../shared/data/sroie-dev"))
    parser.add_argument("--dpi", type=int, default=200, help="of the A4 pages (the splitter's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        help="another rule to score, LOW:FRACTION:MEAN (e.g. 0.9:0.1:0.96)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.command_line = " ".join(["python -m ocrstream.bench.routing", *(argv or sys.argv[1:])])
    report = run(args)
    print(f"{'set':<40} {'pages':>5} {'pages/s':>8} {'nCER':>7} {'routed':>6}")
    for name, row in report["results"].items():
        print(f"{name:<40} {row['pages']:>5} {row['pages_per_s']!s:>8} {row['ncer']:>7} "
              f"{row['routed']:>6}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
