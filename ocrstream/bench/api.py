"""``ocrstream bench api``: requests/s of the HTTP API's upload and status endpoints, and the API
process's memory while one big PDF streams through it (docs/benchmarks.md "HTTP API").

It starts one ``ocrstream api`` process on the configured Kafka and store, under a topic prefix
and a bucket of its own (both removed afterwards), with one tenant's key. The load generator is
this module: ``--concurrency`` aiohttp clients in one event loop, each sending its next request
as soon as the last one is answered (a closed loop: the rate measured is what the API sustains,
not an offered rate), for ``--duration`` seconds per endpoint:

- ``upload``: ``POST /v1/documents`` with a small PNG (multipart, a new document each time:
  the store's multipart upload, the submission record and a ScanSubmitted each);
- ``status``: ``GET /v1/documents/{doc_id}`` of the uploaded documents, in turn.

Then a PDF of ``--big-mb`` MB (scanned-like pages of noise, written to a temporary file) is
uploaded in 1 MiB chunks while a thread samples the API's ``VmRSS`` every 20 ms: before, the
peak during and after, and ``VmHWM``, next to the file's size. No agents run: nothing is OCRed.

With ``--limits`` (the default) every tenant has a requests-per-minute and a pages-per-day limit
too high to be reached, so every request goes through the limiter and every upload is spooled to
a temporary file and its pages counted: the costliest path.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from ocrstream.bench.engine import rss_kib

PART = 5 * 1024 * 1024  # the store part size the API is started with


@dataclass
class Phase:
    """What one endpoint answered in one phase."""

    name: str
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # of 2xx answers
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0

    def summary(self) -> dict[str, Any]:
        ok = sorted(self.latencies)

        def pct(p: float) -> float:
            return round(1000 * ok[min(len(ok) - 1, int(p * len(ok)))], 1) if ok else 0.0

        return {"requests_ok": len(ok), "seconds": round(self.seconds, 2),
                "requests_per_s": round(len(ok) / self.seconds, 1) if self.seconds else 0.0,
                "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "errors": self.errors}  # fmt: skip


def small_png() -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("L", (400, 120), 255)
    ImageDraw.Draw(image).text((10, 50), "ocrstream bench api", fill=0)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def write_big_pdf(path: Path, megabytes: int) -> int:
    """A PDF of at least ``megabytes`` MB: A4 pages of JPEG noise, as a scanner would make
    them incompressible; its size."""
    import numpy as np
    from PIL import Image

    from ocrstream.processors.mupdf import pymupdf

    rng = np.random.default_rng(13)
    with pymupdf.open() as doc:
        size = 0
        while size < megabytes * 1_000_000:  # a new image each page (PyMuPDF shares equal ones)
            jpeg = io.BytesIO()
            noise = rng.integers(0, 256, (1754, 1240), dtype=np.uint8)
            Image.fromarray(noise).save(jpeg, format="JPEG", quality=90)
            page = doc.new_page(width=595, height=842)
            page.insert_image(page.rect, stream=jpeg.getvalue())
            size += len(jpeg.getvalue())
        doc.save(path)
    return path.stat().st_size


def multipart(data: bytes, boundary: str) -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="bench.png"\r\nContent-Type: image/png\r\n\r\n').encode() + data + (
            f"\r\n--{boundary}--\r\n".encode())  # fmt: skip


async def run_phase(name: str, url: str, key: str, concurrency: int, duration: float,
                    make: Any) -> tuple[Phase, list[str]]:  # fmt: skip
    """``concurrency`` clients, each sending ``make(i)`` → (method, path, body, headers) after
    its last answer, until ``duration`` has passed."""
    import aiohttp

    phase, made = Phase(name), []
    auth = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + duration
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=connector) as session:

        async def client(n: int) -> None:
            i = n
            while time.monotonic() < deadline:
                method, path, body, headers = make(i)
                i += concurrency
                started = time.perf_counter()
                try:
                    sent = session.request(method, path, data=body, headers={**auth, **headers})
                    async with sent as response:
                        answer = await response.read()
                except aiohttp.ClientError:
                    phase.errors += 1
                    continue
                phase.statuses[response.status] = phase.statuses.get(response.status, 0) + 1
                if 200 <= response.status < 300:
                    phase.latencies.append(time.perf_counter() - started)
                    if response.status == 202:
                        made.append(json.loads(answer)["doc_id"])

        began = time.monotonic()
        await asyncio.gather(*(client(n) for n in range(concurrency)))
        phase.seconds = time.monotonic() - began
    return phase, made


def big_upload(port: int, key: str, path: Path, pid: int) -> dict[str, Any]:
    """Upload ``path`` in 1 MiB chunks, sampling the API's RSS every 20 ms meanwhile."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(rss_kib(pid))
            stop.wait(0.02)

    boundary = uuid.uuid4().hex

    def body() -> Iterator[bytes]:
        yield (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
               'filename="big.pdf"\r\n\r\n').encode()  # fmt: skip
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                yield chunk
        yield f"\r\n--{boundary}--\r\n".encode()

    before = rss_kib(pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/documents", body=body(), encode_chunked=True, headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
        response = conn.getresponse()
        status, answer = response.status, response.read()
    finally:
        conn.close()
        took = time.monotonic() - started
        stop.set()
        sampler.join()
    after = rss_kib(pid)
    mib = 1024
    return {"status": status, "answer": answer.decode(errors="replace")[:200],
            "file_mb": round(path.stat().st_size / 1e6, 1), "seconds": round(took, 2),
            "rss_before_mib": round(before / mib), "rss_peak_during_mib": round(max(samples,
            default=before) / mib), "rss_after_mib": round(after / mib),
            "rss_growth_mib": round((max(samples, default=before) - before) / mib),
            "vmhwm_mib": round(rss_kib(pid, "VmHWM") / mib),
            "store_part_mib": PART // 2**20}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_api(workdir: Path, prefix: str, bucket: str, limits: bool) -> tuple[Any, int, str]:
    from ocrstream.api.keys import KeyFile

    keys_file = workdir / "api-keys.json"
    key = KeyFile(keys_file).create("bench")
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": prefix, "OCRSTREAM_S3_BUCKET": bucket,
           "OCRSTREAM_API_KEYS_FILE": str(keys_file),
           "OCRSTREAM_S3_PART_SIZE": str(PART)}  # fmt: skip
    if limits:
        env |= {"OCRSTREAM_API_REQUESTS_PER_MINUTE": "1000000000",
                "OCRSTREAM_API_PAGES_PER_DAY": "1000000000"}  # fmt: skip
    port = free_port()
    log = open(workdir / "api.log", "wb")  # noqa: SIM115 - closed with the process below
    proc = subprocess.Popen([sys.executable, "-m", "ocrstream", "api", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"the API exited: see {workdir / 'api.log'}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return proc, port, key
        time.sleep(0.3)
    raise click.ClickException("the API did not become ready in 90 s")


def machine() -> dict[str, Any]:
    from ocrstream.bench.engine import machine as engine_machine

    info = engine_machine()
    info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


@click.command("api")
@click.option("--duration", type=float, default=15.0, show_default=True,
              help="Seconds of load per endpoint.")  # fmt: skip
@click.option("--concurrency", type=int, default=16, show_default=True,
              help="Clients at once (each awaits its answer before the next).")  # fmt: skip
@click.option("--big-mb", type=int, default=50, show_default=True,
              help="Size of the PDF whose upload's memory is measured (0: skip).")  # fmt: skip
@click.option("--limits/--no-limits", default=True, show_default=True,
              help="Limits on (never reached), so requests and pages are counted.")  # fmt: skip
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def api(duration: float, concurrency: int, big_mb: int, limits: bool,
        json_out: Path | None) -> None:  # fmt: skip
    """Requests/s of upload and status, and the API's RSS while a big PDF streams through."""
    from ocrstream.cli.bench import _command_line
    from ocrstream.settings import KafkaSettings, S3Settings
    from ocrstream.storage import ObjectStore
    from ocrstream.streams.topics import delete_topics, ensure_topics

    run = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(topic_prefix=f"bench-api-{run}.")
    store = ObjectStore(S3Settings(bucket=f"ocrstream-bench-api-{run}"))
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"),
                              "machine": machine(), "concurrency": concurrency,
                              "limits": limits}  # fmt: skip
    ensure_topics(kafka, partitions_scale=0.125)
    store.ensure_bucket()
    with tempfile.TemporaryDirectory(prefix="ocrstream-bench-api-") as tmp:
        workdir = Path(tmp)
        proc, port, key = start_api(workdir, kafka.topic_prefix, store.bucket, limits)
        try:
            png = small_png()
            url = f"http://127.0.0.1:{port}"

            def upload(_: int) -> tuple[str, str, bytes, dict[str, str]]:
                boundary = uuid.uuid4().hex
                return "POST", "/v1/documents", multipart(png, boundary), {
                    "Content-Type": f"multipart/form-data; boundary={boundary}"}  # fmt: skip

            click.echo(f"upload: {concurrency} clients for {duration:g} s", err=True)
            up, docs = asyncio.run(run_phase("upload", url, key, concurrency, duration, upload))
            if not docs:
                raise click.ClickException(f"no upload was accepted: {up.statuses}")

            def status(i: int) -> tuple[str, str, None, dict[str, str]]:
                return "GET", f"/v1/documents/{docs[i % len(docs)]}", None, {}

            click.echo(f"status: {concurrency} clients for {duration:g} s", err=True)
            st, _ = asyncio.run(run_phase("status", url, key, concurrency, duration, status))
            report["upload"], report["status"] = up.summary(), st.summary()
            if big_mb > 0:
                pdf = workdir / "big.pdf"
                click.echo(f"writing a {big_mb} MB PDF", err=True)
                write_big_pdf(pdf, big_mb)
                click.echo("uploading it", err=True)
                report["big_upload"] = big_upload(port, key, pdf, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            proc.log.close()
            delete_topics(kafka)
            store.remove_bucket()
    report["command"] = _command_line(click.get_current_context())
    click.echo(format_report(report))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        click.echo(f"wrote {json_out}", err=True)


def format_report(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [f"{r['command']}  ({r['date']})",
             f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
             f"load average at start {m['load_average']}",
             f"{'endpoint':<8} {'req/s':>8} {'ok':>7} {'p50 ms':>8} {'p95 ms':>8} "
             f"{'p99 ms':>8}  statuses"]  # fmt: skip
    for name in ("upload", "status"):
        p = r[name]
        lines.append(f"{name:<8} {p['requests_per_s']:>8} {p['requests_ok']:>7} "
                     f"{p['p50_ms']:>8} {p['p95_ms']:>8} {p['p99_ms']:>8}  {p['statuses']}"
                     + (f", {p['errors']} connection errors" if p["errors"] else ""))  # fmt: skip
    big = r.get("big_upload")
    if big:
        lines.append(f"big upload: {big['file_mb']} MB PDF, HTTP {big['status']} in "
                     f"{big['seconds']} s; API RSS {big['rss_before_mib']} MiB before, "
                     f"{big['rss_peak_during_mib']} MiB peak during (+{big['rss_growth_mib']}), "
                     f"{big['rss_after_mib']} MiB after; store parts of "
                     f"{big['store_part_mib']} MiB")  # fmt: skip
    return "\n".join(lines)
