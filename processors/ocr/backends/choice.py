"""``auto`` on the CPU: per stage, the backend that measured fastest on this machine.

Which CPU backend is faster depends on the CPU, the thread count, the runtimes' versions and
the model, and not the same way for det and rec (on a 2-vCPU Xeon OpenVINO's det was ~3x
onnxruntime's at any thread count while its rec on one thread was 2-3x slower). So ``auto``
follows a measurement, never a fixed rule: the first time an engine starts on a machine, each
installed CPU backend (OpenVINO, onnxruntime) loads det and rec with the options the engine
uses and runs generated input of the shapes the engine gives them (:func:`inputs`): det one
page at the engine's pixel budget (an A4 page at ``det_limit_side``, the shape every page of a
scanner's resolution gets), rec the batches the engine plans for one page of lines
(:data:`REC_PAGE_LINES`: a receipt's short fields and an A4 page's long lines, width-bucketed
and batched by ``rec.plan_streams`` as the engine does), run as the engine runs them (side by
side on the rec streams). Each is warmed up once, then :data:`ROUNDS` rounds run with the
backends' order alternating, best time kept. Each round also runs, once each, inputs of shapes
no session has met (:func:`new_shapes`: in round r the page 32·r px shorter, the lines 32·r px
wider), and a stage's time is the best warm time plus the mean time of those new shapes,
weighed by how often the engine meets a new shape of that stage (:data:`NEW_SHAPE_WEIGHT`). A
process meets new shapes in most of its first batches (55-62% of rec batches on 50 receipts,
75% on 4 A4 pages), and OpenVINO prepares each new shape before running it (7-20 ms a rec
batch, 35-80 ms a det page on a Zen 4); onnxruntime paid little for new rec shapes at one
thread but ~300 ms for a new det page at two (Zen 3), so both are measured, not assumed.
Until format 8, rec was measured on two large batches (12 lines of 320 px, 2 of 1,600), each
split over the streams; there the backends tied on a Zen 3 (v6 small, 2 threads). A page's
batches are many and small (17 on a receipt, of 1 to 13 lines; 57 shapes in 73 batches over 16
receipts), and on those onnxruntime took 0.7-0.86x OpenVINO's time, new shapes or not
(docs/benchmarks.md, session 18). Since session 21 the engine runs one line per rec batch on
the CPU (``OcrSettings.rec_batch_lines``), and these are measured so: 40 runs of one line, a
shape per width bucket. On a Zen 5 that sent v6 small's rec from onnxruntime to OpenVINO in
bf16, whose new shapes had counted once per (lines, width) before. Each stage takes the faster
backend; the engine loads det (and cls, orientation, layout) on det's and rec on rec's.

A candidate that a round leaves more than :data:`DROP_ABOVE` times slower than the stage's
fastest sits out the rounds after, and a stage with one candidate left stops there: on a Zen 4
bf16 ran det and rec ~1.6x faster than either fp32 backend, and the second round, which could
not change that answer, was a third of the measurement's 15 s.

The input's size decides the answer, so it must be the engine's: on a 2-vCPU AMD EPYC
(Zen 3) onnxruntime ran a 512×384 det input in 37 ms against OpenVINO's 55, while on the
1,600×1,120 input every A4 page and receipt gets OpenVINO took 419 ms against 761
(docs/benchmarks.md, session 7); format 1 of the kept file measured the small input and
is measured again.

The choice is kept in ``engine_cache_dir/auto-backend/<key>.json``, the key being the SHA-256
of what the result depends on (:func:`machine`: the CPU's model name and flags, the
architecture, the thread count, the backends' versions, the det and rec files' SHA-256, the rec
height). Later processes read it and measure nothing. A file that cannot be read, is not of
this format, names another key or a backend not installed is ignored (logged) and measured
again. ``ocrstream engine calibrate`` measures again on demand. A lock file makes processes
that start together on a new machine measure once, one after the other, instead of side by
side (which would skew both measurements).

**BF16.** On a CPU that runs bf16 natively (``avx512_bf16`` or ``amx_bf16`` among its flags)
and with the default precision (``fp16``: reduced precision where the device has it; ``fp32``
asks for fp32 alone), det and rec each have a third candidate, :data:`OPENVINO_BF16`: OpenVINO
with ``INFERENCE_PRECISION_HINT=bf16``. It is taken only where it measured fastest: on an AMD
EPYC Zen 5 det ran A4 pages in half the time and read the dev sets as well as f32; on a Zen 4
rec ran 1.43x faster, 13 of 1,064 dev lines read differently (as many better as worse) and a
line's confidence moved by 0.0014 on average (p99 0.019); on a Xeon without AMX bf16 was slower
(docs/benchmarks.md). Results name the stages that ran in bf16 and the page cache keys them
apart.

**Shared between machines.** Kubernetes pods start with an empty engine cache, and a worker
that measures first would read its first page 5-10 s after it started, on every scale-out. A
worker given a :class:`SharedChoices` (the object store: ``ocrstream.storage.engine_cache``)
looks there after its own cache, under the same file name (the key), and keeps what it
measures there too: the first worker on a kind of CPU, thread count and models measures, the
others read its answer. A shared file is checked as a kept one is; a store that cannot be
read or written is logged and the worker measures as before.

**Before the first measurement.** The measurement costs about as much as reading 20 receipts
(9.5 s on a 2-vCPU Zen 4, v6 small: three candidates per stage, bf16 far ahead in both after
the first round; 15 s before candidates dropped out). A process whose settings say
``auto_measure=False`` and that finds no choice kept runs on :data:`PROVISIONAL` instead and
keeps nothing: ``ocrstream ocr`` does so for a job of fewer pages than the measurement costs,
so that a new user's first command on one page takes about a second, not twelve. The next
worker, benchmark, ``engine calibrate`` or long ``ocrstream ocr`` measures and keeps the
choice as before.

**Read before timed.** A candidate is timed only if it reads as onnxruntime (:data:`REFERENCE`,
the runtime the models are published for) does: its warm-up runs lines of text drawn with
OpenCV's Hershey font at the shapes measured (:func:`probe_inputs`), and a candidate whose det
marks other pixels as text (:data:`AGREE`: their IoU) or whose rec reads other classes on the
time steps either reads a character on is refused, logged and named in the kept choice. On an
Intel Xeon with AMX, OpenVINO in f32 read them as onnxruntime to the pixel and the class, and
in bf16 0.993 (det) and 0.997-0.999 (rec) of them; the check is there for a runtime that
computes wrong on a CPU nobody tried it on: there, OpenVINO in bf16 running a blob compiled in
f32 read v6 small's receipts as garbage (nCER 0.997; 0% of the probes' classes) and ``auto``
took it, 1.6x faster than onnxruntime (docs/benchmarks.md, session 42). The probes cost no
run: they are the warm-up's input.

``OCRSTREAM_OCR_BACKEND=openvino|onnxruntime`` forces a backend: nothing is measured then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ocrstream.processors.ocr.backends.base import InferSession, ModelKind
from ocrstream.processors.ocr.models import (
    ModelSet,
    ctc_best_model,
    det_logits_model,
    file_digest,
    package_version,
)
from ocrstream.settings import OcrSettings

log = logging.getLogger(__name__)

CANDIDATES = ("openvino", "onnxruntime")
STAGES = ("det", "rec")
# OpenVINO in bf16: a candidate of det and rec where the CPU has bf16 and the precision allows it
OPENVINO_BF16 = "openvino:bf16"
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# 1 measured a 512x384 det input: too small to tell the backends apart; 2 had no bf16 det;
# 3 no bf16 rec; 4 measured OpenVINO's rec with the ArgMax head (before its best class was
# found by equality) and det with its Sigmoid (models.det_logits_model); 5 det's upsampling
# tail unfolded; 6 no new shapes (warm times alone); 7 rec on two large batches, each split
# over the streams; 8 rec's new shapes weighed as much as its warm runs (as det's still are);
# 9 timed bf16 on the blob OpenVINO's cache held from the f32 candidate's compile
# (openvino_backend.blob_folder); 10 rec's head searched all classes at once (before
# models.CTC_GROUP) and OpenVINO's det joined channels in a Concat (models.SPLIT_CONCATS)
FORMAT = 11
# How much the run of the new-shape inputs weighs beside the warm run, per stage: how often the
# engine meets a shape for the first time. Det: most pages of a first batch of receipts are a
# shape of their own (31 shapes in 50 receipts), so as much as the warm run. Rec, one line per
# batch on the CPU: on a first pass over 10 A4 pages 52 width buckets in 516 runs (10%; up to
# 20% where each stream prepares its own), on 50 receipts 28 in ~1,500, so a quarter: one run
# in five a new shape (docs/benchmarks.md, session 21). Weighed as much as the warm run, the
# new shapes had sent v6 small's rec to onnxruntime on a Zen 5 where OpenVINO in bf16 read
# A4 pages 1.3-1.5x faster in the engine, first pass included.
NEW_SHAPE_WEIGHT = {"det": 1.0, "rec": 0.25}
# One page's lines for rec, (how many, width in px at the rec height): a receipt's fields
# and a table's cells (narrow, many), then longer lines up to three across an A4 page
REC_PAGE_LINES = (
    (12, 96), (5, 128), (3, 160), (4, 192), (3, 256), (2, 320), (2, 416),
    (1, 448), (1, 544), (1, 640), (1, 768), (1, 960), (1, 1280), (3, 1600),
)  # fmt: skip
ROUNDS = 2
# After a round, a candidate whose time so far is more than this many times the stage's fastest
# (and more than DROP_MARGIN_S behind it: timer noise on tiny runs) leaves the race. The same
# candidate's time moved a few percent from round to round on a quiet machine, so a quarter
# slower is no close race.
DROP_ABOVE = 1.25
DROP_MARGIN_S = 0.005
# The candidate every other is checked against, where installed (else the first one racing)
REFERENCE = "onnxruntime"
# How much a candidate must read as the reference on the text probes to be timed: det, the IoU
# of the pixels each marks as text; rec, the share of time steps with the same class among
# those either reads a character on
AGREE = {"det": 0.8, "rec": 0.8}
# What the probes say, repeated to fill a line
PROBE_TEXT = "Invoice 4821 of 2026-12-06: Total 1,234.56 EUR, paid by card. "
# The timer every measurement reads: fake sessions in the tests advance a virtual one, so
# what the race decides does not depend on how busy the machine running them is
clock: Callable[[], float] = time.perf_counter
FOLDER = "auto-backend"
# What a process that may not measure runs on until a measurement is kept (settings
# auto_measure=False): det on OpenVINO, rec on onnxruntime, both in fp32. Not a rule for
# ``auto``, only what an unmeasured short job gets: it is the choice the fp32 candidates
# measured on every CPU of docs/benchmarks.md (Xeon, Zen 3, and Zen 5 without bf16: det on
# OpenVINO 2-3x onnxruntime at the A4 budget; rec on onnxruntime, one line per batch, 0.7-0.9x
# OpenVINO's time), with no reduced precision, which was slower on a Xeon without AMX.
PROVISIONAL = {"det": "openvino", "rec": "onnxruntime"}

Loader = Callable[[str, str], InferSession]  # (backend key, stage) -> a loaded session


class SharedChoices(Protocol):
    """Choices kept where other machines find them, by file name (``<key[:24]>.json``)."""

    def fetch(self, name: str) -> bytes | None:
        """The file's bytes; None when there is none."""
        ...

    def keep(self, name: str, data: bytes) -> None: ...

    def where(self, name: str) -> str:
        """Where the file is kept, for the log."""
        ...


@dataclass(frozen=True, slots=True)
class Choice:
    """The backend for each stage, the times it was chosen by and where it is kept."""

    stages: dict[str, str]  # stage -> backend key
    # stage -> backend key -> the best warm time of the inputs plus the mean of new shapes'
    seconds: dict[str, dict[str, float]]
    machine: dict[str, Any]
    measured: bool  # True: measured by this process; False: read from the cache
    took_s: float  # how long the measurement took (0 when read from the cache)
    path: Path
    # stage -> backend key -> the part of ``seconds`` spent on shapes met for the first time
    new_shape_seconds: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    # True: nothing measured or kept; :data:`PROVISIONAL` (``seconds`` is empty)
    provisional: bool = False
    # stage -> backend key -> how much it read as the reference did, where too little to be
    # timed (:data:`AGREE`); such a candidate has no ``seconds``
    refused: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


def installed() -> tuple[str, ...]:
    """The CPU backends ``auto`` chooses among: those installed, in :data:`CANDIDATES`."""
    return tuple(k for k in CANDIDATES if importlib.util.find_spec(k) is not None)


def cpu_identity() -> tuple[str, str]:
    """The CPU's model name and a digest of its flags (``/proc/cpuinfo``, else ``platform``)."""
    name, flags = _cpuinfo()
    return name, hashlib.sha256(flags.encode()).hexdigest()[:16]


def bf16_offered(settings: OcrSettings, candidates: tuple[str, ...]) -> bool:
    """Whether det and rec get the :data:`OPENVINO_BF16` candidate: OpenVINO installed, a CPU
    with bf16 in its flags, and the default precision (``fp16``), not ``fp32`` or another."""
    if "openvino" not in candidates or settings.precision != "fp16":
        return False
    return cpu_has_bf16()


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 natively (:data:`BF16_FLAGS` among its flags)."""
    return bool(BF16_FLAGS & set(_cpuinfo()[1].split()))


def stage_candidates(
    settings: OcrSettings, candidates: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    """What each stage chooses among: the installed backends, and OpenVINO in bf16 where
    :func:`bf16_offered` allows it."""
    offered = (*candidates, OPENVINO_BF16) if bf16_offered(settings, candidates) else candidates
    return dict.fromkeys(STAGES, offered)


def backend_of(key: str) -> tuple[str, str | None]:
    """A candidate's backend module key and the precision it forces (None: the settings')."""
    backend, _, precision = key.partition(":")
    return backend, precision or None


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, str]:
    """The CPU's model name and its flags, sorted, space-separated."""
    name, flags = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                field, _, value = line.partition(":")
                field = field.strip()
                if field == "model name" and not name:
                    name = value.strip()
                elif field in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
                if name and flags:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine(), flags


def machine(settings: OcrSettings, models: ModelSet, candidates: tuple[str, ...]) -> dict[str, Any]:
    """Everything the measured choice depends on (its cache key is this, hashed)."""
    cpu, flags = cpu_identity()
    return {
        "cpu": cpu,
        "cpu_flags": flags,
        "arch": platform.machine(),
        "threads": max(1, settings.threads),
        "backends": {k: package_version(k) for k in candidates},
        "models": {"det": file_digest(models.det_path), "rec": file_digest(models.rec_path)},
        "rec_height": settings.rec_height,
        "bf16": bf16_offered(settings, candidates),
        "inputs": {
            stage: [list(x) for x in shapes] for stage, shapes in input_shapes(settings).items()
        },
    }


def input_shapes(settings: OcrSettings) -> dict[str, list[tuple[int, ...]]]:
    """The NCHW shapes measured per stage: what the engine gives det for a full page, and the
    rec batches it plans for the lines of :data:`REC_PAGE_LINES` (``rec_batch_lines`` lines and
    ``rec_batch_pixels`` of summed width at most, each batch one width bucket)."""
    from ocrstream.processors.ocr.backends import REC_STREAMS
    from ocrstream.processors.ocr.det import A4_PAGE, DetParams, det_shape
    from ocrstream.processors.ocr.rec import RecParams, plan_streams

    h, w = det_shape(*A4_PAGE, DetParams(limit_side=settings.det_limit_side))
    widths = [width for count, width in REC_PAGE_LINES for _ in range(count)]
    params = RecParams(max_batch_width=settings.rec_batch_pixels)
    rec: list[tuple[int, ...]] = [
        (len(batch), 3, settings.rec_height, widths[batch[0]])
        for batch in plan_streams(widths, settings.rec_batch_lines, params, REC_STREAMS)
    ]
    return {"det": [(1, 3, h, w)], "rec": rec}


def cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def cache_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / FOLDER / f"{key[:24]}.json"


def read_cached(path: Path, key: str, candidates: tuple[str, ...]) -> Choice | None:
    """The choice kept at ``path`` if it is whole, of this format and for this key."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("auto backend: ignoring unreadable %s (%s); measuring again", path, e)
        return None
    return parse_kept(text, path, key, candidates, str(path))


def parse_kept(
    text: str | bytes, path: Path, key: str, candidates: tuple[str, ...], where: str
) -> Choice | None:
    """A kept choice's file (read from ``where``) if it is whole, of this format and for
    this key; its :attr:`Choice.path` is ``path``."""
    try:
        data = json.loads(text)
    except ValueError as e:
        log.warning("auto backend: ignoring unreadable %s (%s); measuring again", where, e)
        return None
    try:
        if data["format"] != FORMAT or data["key"] != key:
            raise ValueError("written for another machine, model or format")
        stages = {stage: str(data["stages"][stage]) for stage in STAGES}
        if not {backend_of(k)[0] for k in stages.values()} <= set(candidates):
            raise ValueError(f"names a backend not installed: {stages}")
        seconds = {
            stage: {str(k): float(v) for k, v in data["seconds"][stage].items()} for stage in STAGES
        }
        fields = dict(data["machine"])
        new = {
            stage: {str(k): float(v) for k, v in data["new_shape_seconds"][stage].items()}
            for stage in STAGES
        }
        refused = {
            str(stage): {str(k): float(v) for k, v in row.items()}
            for stage, row in data.get("refused", {}).items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        log.warning("auto backend: ignoring %s (%s); measuring again", where, e)
        return None
    return Choice(stages, seconds, fields, measured=False, took_s=0.0, path=path,
                  new_shape_seconds=new, refused=refused)  # fmt: skip


def _encode(choice: Choice, key: str) -> str:
    data = {
        "format": FORMAT,
        "key": key,
        "stages": choice.stages,
        "seconds": choice.seconds,
        "new_shape_seconds": choice.new_shape_seconds,
        "refused": choice.refused,
        "machine": choice.machine,
        "took_s": round(choice.took_s, 3),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _from_shared(
    shared: SharedChoices, path: Path, key: str, candidates: tuple[str, ...], writable: bool
) -> Choice | None:
    """The choice another machine kept in ``shared`` for this key, kept here too."""
    where = shared.where(path.name)
    try:
        data = shared.fetch(path.name)
    except Exception as e:  # noqa: BLE001 - any store failure: measure here instead
        log.warning("auto backend: cannot read %s (%s); measuring here", where, e)
        return None
    if data is None:
        return None
    found = parse_kept(data, path, key, candidates, where)
    if found is None:
        return None
    if writable:
        try:
            _write(path, data.decode())
        except (OSError, UnicodeDecodeError) as e:
            log.warning("auto backend: cannot write %s (%s)", path, e)
    stages = found.stages
    log.info("auto backend from %s: det %s, rec %s", where, stages["det"], stages["rec"])
    return found


def _share(shared: SharedChoices, name: str, text: str) -> None:
    try:
        shared.keep(name, text.encode())
    except Exception as e:  # noqa: BLE001 - the choice stands; others measure for themselves
        log.warning("auto backend: cannot keep the choice in %s (%s)", shared.where(name), e)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold the lock of ``path``'s key; yields False (no lock) where the cache is not
    writable: the choice is then measured by every process and kept by none."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path.with_suffix(".lock"), "a", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        log.warning("auto backend: cannot keep the choice in %s (%s)", path.parent, e)
        yield False
        return
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def choose(
    settings: OcrSettings,
    models: ModelSet,
    *,
    remeasure: bool = False,
    loader: Loader | None = None,
    shared: SharedChoices | None = None,
) -> Choice:
    """The backend per stage for these settings and models: kept here (or in ``shared``),
    else measured and kept (in both)."""
    candidates = installed()
    fields = machine(settings, models, candidates)
    key = cache_key(fields)
    path = cache_path(settings.engine_cache_dir, key)
    with _locked(path) as writable:
        if not remeasure and writable:
            cached = read_cached(path, key, candidates)
            if cached is not None:
                log.debug("auto backend from %s: %s", path, cached.stages)
                return cached
        if not remeasure and shared is not None:
            found = _from_shared(shared, path, key, candidates, writable)
            if found is not None:
                return found
        if not settings.auto_measure and not remeasure:
            return provisional(fields, candidates, path)
        start = clock()
        load = loader or default_loader(settings, models)
        shapes = input_shapes(settings)
        seconds, new, refused = measure(
            stage_candidates(settings, candidates),
            load,
            shapes,
            settings.rec_batch_pixels,
            probe_inputs(shapes, models.det_mean, models.det_std),
        )
        took = clock() - start
        stages = {stage: min(seconds[stage], key=seconds[stage].__getitem__) for stage in STAGES}
        choice = Choice(stages, seconds, fields, measured=True, took_s=took, path=path,
                        new_shape_seconds=new, refused=refused)  # fmt: skip
        text = _encode(choice, key)
        if writable:
            try:
                _write(path, text)
            except OSError as e:
                log.warning("auto backend: cannot write %s (%s)", path, e)
        if shared is not None:
            _share(shared, path.name, text)
    log.info(
        "auto backend measured in %.1f s on %s, %d threads: det %s (%s), rec %s (%s); kept in %s",
        took, fields["cpu"], fields["threads"], stages["det"], _times(seconds["det"]),
        stages["rec"], _times(seconds["rec"]), path,
    )  # fmt: skip
    return choice


def provisional(fields: dict[str, Any], candidates: tuple[str, ...], path: Path) -> Choice:
    """:data:`PROVISIONAL`, each stage's backend where installed (else the first candidate),
    for a process that may not measure; nothing is kept."""
    stages = {
        stage: PROVISIONAL[stage] if PROVISIONAL[stage] in candidates else candidates[0]
        for stage in STAGES
    }
    log.info(
        "auto backend not measured yet on %s, %d threads: this run takes det on %s and rec on "
        "%s without measuring (a measurement takes seconds; `ocrstream engine calibrate`, "
        "a worker or a longer job measures it and keeps the choice)",
        fields["cpu"], fields["threads"], stages["det"], stages["rec"],
    )  # fmt: skip
    seconds: dict[str, dict[str, float]] = {stage: {} for stage in STAGES}
    return Choice(stages, seconds, fields, measured=False, took_s=0.0, path=path,
                  provisional=True)  # fmt: skip


def _times(seconds: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in seconds.items())


def default_loader(settings: OcrSettings, models: ModelSet) -> Loader:
    """Load det and rec as the engine does (same shapes, streams and compact CTC head)."""
    from ocrstream.processors.ocr.backends import create_key, det_options, rec_options

    def load(key: str, stage: str) -> InferSession:
        name, precision = backend_of(key)
        backend = create_key(name)
        kind: ModelKind
        if stage == "det":
            logits = det_logits_model(models.det_path, settings.engine_cache_dir, name)
            path = logits if logits is not None else models.det_path
            kind, options = "det", det_options(settings)
        else:
            compact = ctc_best_model(models.rec_path, settings.engine_cache_dir)
            path = compact[0] if compact is not None else models.rec_path
            kind, options = "rec", rec_options(settings)
        if precision is not None:
            options = dataclasses.replace(options, precision=precision)
        return backend.load(path, kind, options)

    return load


def new_shapes(
    shapes: dict[str, list[tuple[int, ...]]], n: int, max_pixels: int
) -> dict[str, list[tuple[int, ...]]]:
    """Round ``n``'s (from 1) inputs of shapes the measured ones never have: det the page
    32·n px shorter (pages after the first, smaller than the warm-up's largest), rec each
    batch's lines 32·n px wider (the next width buckets: another page of as many lines), fewer
    lines where they would pass ``max_pixels`` of summed width."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for stage, items in shapes.items():
        fresh: list[tuple[int, ...]] = []
        for lines, channels, height, width in items:
            if stage == "det":
                fresh.append((lines, channels, max(32, height - 32 * n), width))
            else:
                wider = width + 32 * n
                fresh.append((max(1, min(lines, max_pixels // wider)), channels, height, wider))
        out[stage] = fresh
    return out


def measure(
    candidates: tuple[str, ...] | dict[str, tuple[str, ...]],
    load: Loader,
    shapes: dict[str, list[tuple[int, ...]]],
    max_pixels: int,
    probes: dict[str, list[npt.NDArray[np.float32]]] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per stage and candidate (the same for every stage, or per stage): the best over the
    rounds it ran (:data:`ROUNDS`, fewer once :data:`DROP_ABOVE` drops it or it is the last
    left) of the time to run every input of ``shapes[stage]`` once warm, plus the mean over
    those rounds of the time to run once each the inputs of :func:`new_shapes`, which
    no session has met before (random values: the time of these networks does not depend on
    them), weighed by :data:`NEW_SHAPE_WEIGHT`; that second part alone, unweighed; and the
    candidates refused untimed, with how much they read as the reference did.

    The warm-up runs ``probes`` (text, :func:`probe_inputs`, of the same shapes) where given:
    a candidate whose output :func:`agreement` finds under :data:`AGREE` with
    :data:`REFERENCE`'s is refused."""
    per_stage = candidates if isinstance(candidates, dict) else dict.fromkeys(STAGES, candidates)
    rng = np.random.default_rng(0)
    sessions = {(k, stage): load(k, stage) for stage in STAGES for k in per_stage[stage]}
    inputs = {
        stage: [rng.uniform(-1, 1, shape).astype(np.float32) for shape in shapes[stage]]
        for stage in STAGES
    }
    fresh = [new_shapes(shapes, n + 1, max_pixels) for n in range(ROUNDS)]
    best: dict[str, dict[str, float]] = {stage: {} for stage in STAGES}
    new_sum: dict[str, dict[str, float]] = {stage: {} for stage in STAGES}
    rounds: dict[str, dict[str, int]] = {stage: {} for stage in STAGES}
    refused: dict[str, dict[str, float]] = {}

    def so_far(stage: str, k: str) -> float:
        mean_new = new_sum[stage][k] / rounds[stage][k]
        return best[stage][k] + NEW_SHAPE_WEIGHT[stage] * mean_new

    for stage in STAGES:
        racing = list(per_stage[stage])
        warm = probes[stage] if probes is not None else inputs[stage]
        # warm-up: first-shape compilation, on the probes where given
        read = {k: _run(sessions[(k, stage)], warm) for k in racing}
        if probes is not None:
            reference = REFERENCE if REFERENCE in racing else racing[0]
            for k in racing:
                agreed = agreement(stage, read[k], read[reference])
                if agreed < AGREE[stage]:
                    log.warning(
                        "auto backend: %s %s reads text as %s does on %.0f%% of it (at least "
                        "%.0f%% needed): not used on this machine", k, stage, reference,
                        100 * agreed, 100 * AGREE[stage],
                    )  # fmt: skip
                    refused.setdefault(stage, {})[k] = round(agreed, 4)
            racing = [k for k in racing if k not in refused.get(stage, {})]
        for n in range(ROUNDS):
            new_inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for shape in fresh[n][stage]]
            order = racing if n % 2 == 0 else racing[::-1]
            for k in order:
                start = clock()
                _run(sessions[(k, stage)], inputs[stage])
                took = clock() - start
                best[stage][k] = min(best[stage].get(k, took), took)
                start = clock()
                _run(sessions[(k, stage)], new_inputs)
                took = clock() - start
                new_sum[stage][k] = new_sum[stage].get(k, 0.0) + took
                rounds[stage][k] = rounds[stage].get(k, 0) + 1
            fastest = min(so_far(stage, k) for k in racing)
            bar = max(DROP_ABOVE * fastest, fastest + DROP_MARGIN_S)
            racing = [k for k in racing if so_far(stage, k) <= bar]
            if len(racing) == 1:
                break
    timed = {stage: [k for k in per_stage[stage] if k in best[stage]] for stage in STAGES}
    total = {stage: {k: round(so_far(stage, k), 4) for k in timed[stage]} for stage in STAGES}
    return (
        total,
        {
            stage: {k: round(new_sum[stage][k] / rounds[stage][k], 4) for k in timed[stage]}
            for stage in STAGES
        },
        refused,
    )


def _run(session: InferSession, xs: list[npt.NDArray[np.float32]]) -> list[Any]:
    """Run every input once as the engine does: one after the other on a session that runs
    one at a time (det); side by side on one with several requests (rec's streams; the inputs
    already split and ordered for them by ``rec.plan_streams``). The outputs, in order."""
    n = max(1, int(getattr(session, "concurrency", 1)))
    if n == 1:
        return [session.run(x) for x in xs]
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(session.run, xs))


def probe_inputs(
    shapes: dict[str, list[tuple[int, ...]]],
    det_mean: tuple[float, float, float],
    det_std: tuple[float, float, float],
) -> dict[str, list[npt.NDArray[np.float32]]]:
    """Black text on white at each of ``shapes``, normalised as the engine gives it to each
    stage: det a page of lines ~30 px tall, rec one line filling the model's height."""
    import cv2

    from ocrstream.processors.ocr.det import DetParams, normalise
    from ocrstream.processors.ocr.rec import RecParams, batch_tensor

    font, ink = cv2.FONT_HERSHEY_SIMPLEX, (0, 0, 0)
    out: dict[str, list[npt.NDArray[np.float32]]] = {"det": [], "rec": []}
    for n, _, h, w in shapes["det"]:
        page = np.full((h, w, 3), 255, np.uint8)
        for y in range(56, h - 16, 64):
            cv2.putText(page, PROBE_TEXT * 8, (24, y), font, 1.0, ink, 2, cv2.LINE_AA)
        x = normalise(page, (h, w), DetParams(mean=det_mean, std=det_std))
        out["det"].append(np.repeat(x[None], n, axis=0))
    for n, _, h, w in shapes["rec"]:
        line = np.full((h, w, 3), 255, np.uint8)
        text = PROBE_TEXT * (1 + w // 400)
        stroke = max(1, h // 24)
        cv2.putText(line, text, (4, round(0.7 * h)), font, h / 40, ink, stroke, cv2.LINE_AA)
        out["rec"].append(batch_tensor([line] * n, w, RecParams(height=h)))
    return out


def agreement(stage: str, outputs: list[Any], reference: list[Any]) -> float:
    """How much ``outputs`` read as ``reference``: det, the IoU of the pixels each marks as
    text (probability above det's threshold, ``DetParams.thresh``, from logits or
    probabilities); rec, the share of time steps with the same best class among those where
    either reads a character (class 0 is CTC's blank; the compact head's first column is the
    class). 1.0 where neither marks any."""
    same = either = 0
    for ours, theirs in zip(outputs, reference, strict=True):
        a, b = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
        if stage == "det":
            text_a, text_b = _text_pixels(a), _text_pixels(b)
            same += int(np.count_nonzero(text_a & text_b))
            either += int(np.count_nonzero(text_a | text_b))
        else:
            class_a, class_b = _best_class(a), _best_class(b)
            read = (class_a != 0) | (class_b != 0)
            same += int(np.count_nonzero((class_a == class_b) & read))
            either += int(np.count_nonzero(read))
    return 1.0 if either == 0 else same / either


def _text_pixels(m: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    from ocrstream.processors.ocr.det import DetParams

    thresh = DetParams().thresh
    logits = float(m.min()) < 0.0 or float(m.max()) > 1.0
    return m > (math.log(thresh / (1.0 - thresh)) if logits else thresh)


def _best_class(out: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """Per time step, the class: the compact head's first column (N x T x 3), else the
    argmax of all classes' probabilities."""
    if out.ndim == 3 and out.shape[-1] == 3:
        return np.rint(out[..., 0]).astype(np.int64)
    return np.argmax(out, axis=-1).astype(np.int64)
