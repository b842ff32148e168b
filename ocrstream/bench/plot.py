"""The PNG of ``bench pipeline --plot``: throughput, lag and OCR workers over time.

Three panels share the time axis (seconds since the first document was submitted): pages/s
out of the OCR workers (each second's count and a 5-second average), the worker group's total
lag on ``ocr.pages.v1``, and the number of OCR workers in the group — with, under the local
autoscaler, the replicas it runs and the count its rule asks for. Markers show when the last
document was submitted and when the last one finished, so scaling can be read against the load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ocrstream.bench.timeline import Point, throughput


def plot_timeline(
    points: Sequence[Point],
    path: Path,
    *,
    title: str,
    submitted_s: float | None = None,
    finished_s: float | None = None,
    lag_threshold: int | None = None,
) -> Path:
    """Write the PNG to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    pts = list(points)
    t = [p.t for p in pts]
    fig, (ax_rate, ax_lag, ax_workers) = plt.subplots(
        3, 1, figsize=(10, 8), sharex=True, gridspec_kw={"height_ratios": [3, 3, 2]}
    )
    fig.suptitle(title, fontsize=11)

    # Batches make the per-second count spiky; the average spans a fifteenth of the run.
    window = max(5.0, round((t[-1] if t else 0.0) / 15))
    raw = throughput(pts, window_s=1.0)
    smooth = throughput(pts, window_s=window)
    ax_rate.plot(t, [r for _, r in raw], color="tab:blue", alpha=0.35, lw=1, label="per second")
    ax_rate.plot(t, [r for _, r in smooth], color="tab:blue", lw=2,
                 label=f"{window:.0f} s average")  # fmt: skip
    ax_rate.set_ylabel("pages/s out of OCR")
    ax_rate.set_ylim(bottom=0)
    ax_rate.legend(loc="upper left", fontsize=8, framealpha=0.8)

    lag = [float("nan") if p.lag is None else p.lag for p in pts]
    ax_lag.fill_between(t, lag, step="post", color="tab:orange", alpha=0.3)
    ax_lag.step(t, lag, where="post", color="tab:orange", lw=1.5, label="lag (pages)")
    if lag_threshold:
        ax_lag.axhline(lag_threshold, color="gray", ls=":", lw=1,
                       label=f"lag threshold per worker ({lag_threshold})")  # fmt: skip
    ax_lag.set_ylabel("lag on ocr.pages.v1")
    ax_lag.set_ylim(bottom=0)
    ax_lag.legend(loc="upper left", fontsize=8, framealpha=0.8)

    members = [float("nan") if p.members is None else p.members for p in pts]
    ax_workers.step(t, members, where="post", color="tab:green", lw=2,
                    label="workers in the group")  # fmt: skip
    if any(p.desired is not None for p in pts):
        desired = [float("nan") if p.desired is None else p.desired for p in pts]
        replicas = [float("nan") if p.replicas is None else p.replicas for p in pts]
        ax_workers.step(t, replicas, where="post", color="tab:purple", lw=1.2,
                        label="autoscaler: running")  # fmt: skip
        ax_workers.step(t, desired, where="post", color="black", lw=1, ls="--",
                        label="autoscaler: desired")  # fmt: skip
    ax_workers.set_ylabel("OCR workers")
    ax_workers.set_xlabel("seconds since the first submission")
    top = max([p.members or 0 for p in pts] + [p.desired or 0 for p in pts] + [1])
    ax_workers.set_ylim(0, top + 1)
    ax_workers.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_workers.legend(loc="upper left", fontsize=8, framealpha=0.8)

    for ax in (ax_rate, ax_lag, ax_workers):
        ax.grid(True, alpha=0.3)
        for x, text in ((submitted_s, "all submitted"), (finished_s, "all done")):
            if x is not None:
                ax.axvline(x, color="dimgray", ls="--", lw=0.8)
                if ax is ax_workers:
                    ax.annotate(text, (x, 0), xycoords=("data", "axes fraction"),
                                xytext=(3, 4), textcoords="offset points", fontsize=8,
                                color="dimgray", rotation=90, va="bottom")  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
