"""``ocrstream run`` as a job runner stops it: the agents it started go with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ocrstream.settings import KafkaSettings
from ocrstream.storage import ObjectStore
from tests.integration.harness import interruptible, text_doc, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AGENTS = ("splitter", "ocr-worker", "assembler", "lag-exporter")


def _agents_of(proc: psutil.Process) -> dict[str, psutil.Process]:
    found = {}
    for child in proc.children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        for name in AGENTS:
            if name in cmdline:
                found[name] = child
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_stopped_by_a_signal_stops_its_agents(
    topics: KafkaSettings,
    object_store: ObjectStore,
    metrics_ports: None,
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    doc = tmp_path / "scan.pdf"
    doc.write_bytes(text_doc(1, 2).data)
    env = {**os.environ, "OCRSTREAM_TOPIC_PREFIX": topics.topic_prefix,
           "OCRSTREAM_S3_BUCKET": object_store.bucket}  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, "-m", "ocrstream", "run", str(doc), "--output", str(tmp_path / "out"),
         "--no-infra", "--partitions-scale", "0.125", "--timeout", "600"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=interruptible,
    )  # fmt: skip
    try:
        parent = psutil.Process(run.pid)
        wait_until(lambda: len(_agents_of(parent)) == len(AGENTS), 60, "the agents to start")
        agents = list(_agents_of(parent).values())
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=90)
        _, alive = psutil.wait_procs(agents, timeout=30)
        assert not alive, f"agents left running after `ocrstream run` ended: {alive}"
        assert "stopping agents" in stderr.decode(errors="replace"), stderr[-2000:]
        assert run.returncode != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
