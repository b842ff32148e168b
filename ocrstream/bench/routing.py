"""``python -m ocrstream.bench.routing``: tiny-first confidence routing against small-only.

On a mixed set — clean synthetic A4 pages, SROIE receipts and degraded scans of other A4 pages
(:func:`~ocrstream.bench.datasets.degrade`) — every page is read, in one process with the same
threads, by the three engines of the comparison, one after the other:

- ``small``: the default engine (``ppocrv6-small``), the baseline (small-only);
- ``tiny``: the fast primary pool (``ppocrv6-tiny``);
- ``accurate``: the accurate pool's engine (:class:`~ocrstream.settings.AccurateOcrSettings`),
  only for the pages the routing rule (:class:`~ocrstream.settings.RoutingSettings`) finds weak
  in tiny's reading or, by its early part, in the page's image.

Small-only's time is the sum of small's page times; tiny-first's is tiny's on every page plus
accurate's on the routed ones, whose reading replaces tiny's. With the early rule on, every
page's time includes measuring its quality (:mod:`ocrstream.processors.page_quality`), and a
page it routes costs that and accurate's reading only (tiny never reads it). Interleaving the
engines page by page exposes both setups to the same load on a shared machine. CER is
normalised (nCER, see :mod:`ocrstream.bench.cer`), summed over pages. With ``--rescue
MODEL:BELOW`` every rule is scored a second time (``name+rescue``) on tiny's reading after
:class:`~ocrstream.processors.ocr.rescue.LineRescue`, its time added to tiny's. Decoding
is outside the timings (the same for both). Prints a table and writes JSON.
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
    early: int = 0  # of the routed, those the early rule sent unread
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
            "routed_early": self.early,
        }


def mixed_set(a4: int, degraded: int, receipts: int, sroie: Path, dpi: int, *,
              a4_seed: int = 100, degraded_seed: int = 200, receipts_from: int = 0,
              ) -> list[tuple[str, bytes, tuple[TextLine, ...]]]:  # fmt: skip
    """``a4`` clean pages of seeds from ``a4_seed``, ``degraded`` scans of pages of seeds from
    ``degraded_seed`` and ``receipts`` SROIE receipts from the ``receipts_from``-th (sorted
    by name): one set to tune a rule on, another (other seeds and receipts) to report on."""
    pages: list[tuple[str, bytes, tuple[TextLine, ...]]] = []
    for seed in range(a4_seed, a4_seed + a4):
        data, gt = render_a4_page(seed, dpi=dpi)
        pages.append(("a4", data, gt))
    for seed in range(degraded_seed, degraded_seed + degraded):
        data, gt = render_a4_page(seed, dpi=dpi)
        pages.append(("degraded", degrade(data, seed=seed), gt))
    for sample in load_sroie(sroie)[receipts_from : receipts_from + receipts]:
        assert sample.gt is not None
        pages.append(("receipt", sample.path.read_bytes(), sample.gt))
    return pages


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ocrstream.processors.imageio import decode_image
    from ocrstream.processors.ocr.engine import OcrEngine
    from ocrstream.processors.ocr.rescue import LineRescue
    from ocrstream.processors.page_quality import measure
    from ocrstream.processors.routing import RoutingRule
    from ocrstream.settings import AccurateOcrSettings, OcrSettings, RoutingSettings

    threads = args.threads
    small = OcrEngine(OcrSettings(model="ppocrv6-small", threads=threads))
    tiny = OcrEngine(OcrSettings(model="ppocrv6-tiny", threads=threads))
    rescue: LineRescue | None = None
    if args.rescue:  # MODEL:BELOW, re-reading tiny's low-confidence lines
        model, below = args.rescue.rsplit(":", 1)
        rescue = LineRescue(tiny.settings, model, float(below))
    accurate = OcrEngine(AccurateOcrSettings(threads=threads))
    r = RoutingSettings()
    rules = {"tiny-first": RoutingRule(r.low_confidence, r.max_low_fraction,
                                       r.min_mean_confidence, r.min_lines,
                                       r.early_max_noise, r.early_min_contrast)}  # fmt: skip
    for spec in args.rule:  # LOW:FRACTION:MEAN[:NOISE[:CONTRAST]], on the same readings
        values = [float(v) for v in spec.split(":")]
        low, fraction, mean = values[:3]
        noise, contrast = (*values[3:], 0.0, 0.0)[:2]
        rules[f"tiny-first[{spec}]"] = RoutingRule(low, fraction, mean, r.min_lines,
                                                   noise, contrast)  # fmt: skip
    pages = mixed_set(args.a4, args.degraded, args.receipts, args.sroie, args.dpi,
                      a4_seed=args.a4_seed, degraded_seed=args.degraded_seed,
                      receipts_from=args.receipts_from)  # fmt: skip
    per_page: list[dict[str, Any]] = []
    # each rule on tiny's own reading, and with --rescue also on the rescued one (name+rescue)
    # +kept: the rule on tiny's own confidences, the rescue only on the pages it keeps
    variants = [""] if rescue is None else ["", "+rescue", "+kept"]
    setups = ("small-only", *(name + v for name in rules for v in variants))
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
        start = time.perf_counter()
        quality = measure(image)
        t_quality = time.perf_counter() - start
        t_small, p_small = read(small, image)
        t_tiny, p_tiny = read(tiny, image)
        readings = {"": (0.0, p_tiny)}
        if rescue is not None:
            start = time.perf_counter()
            p_resc = rescue.rescue(image, p_tiny)
            readings["+rescue"] = readings["+kept"] = (time.perf_counter() - start, p_resc)
        early, routed = {}, {}
        for name, rule in rules.items():
            for v, (_, p_read) in readings.items():
                early[name + v] = rule.weak_image(quality)
                judged = p_tiny if v == "+kept" else p_read
                confidences = [ln.confidence for ln in judged.lines]
                routed[name + v] = early[name + v] or rule.weak(confidences)
        t_acc, p_acc = read(accurate, image) if any(routed.values()) else (0.0, None)
        small_cer = page_cer(lines(p_small), gt, normalised=True)
        per_page.append({"kind": kind, "noise": quality.noise, "contrast": quality.contrast,
                         "quality_ms": round(t_quality * 1000, 1),
                         "seconds": {"small": round(t_small, 3), "tiny": round(t_tiny, 3),
                                     "rescue": round(readings.get("+rescue", (0.0,))[0], 3),
                                     "accurate": round(t_acc, 3)},
                         "rescued_lines": sum(a.text != b.text for a, b in zip(
                             p_tiny.lines, readings.get("+rescue", (0.0, p_tiny))[1].lines,
                             strict=True))})  # fmt: skip
        for key in ("all", kind):
            tallies[("small-only", key)].add(t_small, small_cer)
            for name, weak in routed.items():
                rule_name = name.removesuffix("+rescue").removesuffix("+kept")
                t_more, p_read = readings[name[len(rule_name) :]]
                page = p_acc if weak else p_read
                if weak and name.endswith("+kept"):
                    t_more = 0.0  # routed on tiny's reading: never rescued
                tally = tallies[(name, key)]
                seconds = t_quality if rules[rule_name].early else 0.0
                seconds += t_acc if early[name] else t_tiny + t_more + (t_acc if weak else 0.0)
                tally.add(seconds, page_cer(lines(page), gt, normalised=True))
                tally.routed += int(weak)
                tally.early += int(early[name])
        print(f"{n}/{len(pages)} {kind}: small {t_small:.2f}s, tiny {t_tiny:.2f}s, accurate "
              f"{t_acc:.2f}s, routed by {[k for k, v in routed.items() if v]}",
              flush=True)  # fmt: skip
    report = {
        "command": args.command_line,
        "threads": threads,
        "dpi": args.dpi,
        "rescue": args.rescue,
        "rules": {
            name: {
                "low_confidence": r.low_confidence,
                "max_low_fraction": r.max_low_fraction,
                "min_mean_confidence": r.min_mean_confidence,
                "early_max_noise": r.max_noise,
                "early_min_contrast": r.min_contrast,
            }
            for name, r in rules.items()
        },
        "machine": machine(),
        "results": {f"{s}/{k}": t.row() for (s, k), t in tallies.items()},
        "pages": per_page,
    }
    return report


def main(argv: list[str] | None = None) -> None:
    import sys

    parser = argparse.ArgumentParser(prog="python -m ocrstream.bench.routing")
    parser.add_argument("--a4", type=int, default=5, help="clean synthetic A4 pages")
    parser.add_argument("--degraded", type=int, default=5, help="degraded A4 scans")
    parser.add_argument("--receipts", type=int, default=10, help="SROIE receipts")
    parser.add_argument("--a4-seed", type=int, default=100, help="of the first clean page")
    parser.add_argument("--degraded-seed", type=int, default=200, help="of the first scan")
    parser.add_argument("--receipts-from", type=int, default=0, help="the first receipt's index")
    parser.add_argument("--sroie", type=Path, default=Path("../shared/data/sroie-dev"))
    parser.add_argument("--dpi", type=int, default=200, help="of the A4 pages (the splitter's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        help="another rule to score, LOW:FRACTION:MEAN[:NOISE[:CONTRAST]] (e.g. 0.9:0.1:0.96:8)",
    )
    parser.add_argument(
        "--rescue",
        default="",
        help="also score every rule with tiny's lines re-read, MODEL:BELOW (ppocrv6-small:0.9)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.command_line = " ".join(["python -m ocrstream.bench.routing", *(argv or sys.argv[1:])])
    report = run(args)
    print(f"{'set':<40} {'pages':>5} {'pages/s':>8} {'nCER':>7} {'routed':>6} {'early':>5}")
    for name, row in report["results"].items():
        print(f"{name:<40} {row['pages']:>5} {row['pages_per_s']!s:>8} {row['ncer']:>7} "
              f"{row['routed']:>6} {row['routed_early']:>5}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
