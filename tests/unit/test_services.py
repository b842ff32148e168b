"""Local services without a broker: rendered configs, process handling, the service lifecycle."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from ocrstream.services import ServiceError, State, build_services, down, status, up
from ocrstream.services import process as proc_mod
from ocrstream.services.base import Launch, Service, repo_infra_dir
from ocrstream.services.kafka import new_cluster_id, render_server_properties
from ocrstream.services.prometheus import METRICS_PORTS, render_prometheus_config
from ocrstream.settings import S3Settings, ServicesSettings
from tests.polling import wait_until


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {k: v for k, v in pairs}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- Kafka ---------------------------------------------------------------------------------


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    settings = ServicesSettings(home=tmp_path, kafka_port=29092, kafka_controller_port=29093)
    props = _properties(render_server_properties(settings, tmp_path / "data"))

    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:29093"
    assert "controller.quorum.voters" not in props  # `format --standalone` forbids it
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert int(props["message.max.bytes"]) == 8 * 1024 * 1024


def test_cluster_id_is_kafka_shaped() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_kafka_pom_pins_version_and_log4j2_binding() -> None:
    pom = (repo_infra_dir() / "kafka" / "pom.xml").read_text()
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<kafka.version>4.1.1</kafka.version>" in pom
    assert "<version>${kafka.version}</version>" in pom
    assert "maven-dependency-plugin" in pom
    # Kafka 4.1 logs through SLF4J 1.7: the 1.x binding, not log4j-slf4j2-impl.
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in pom
    assert (repo_infra_dir() / "kafka" / "log4j2.xml").exists()


# -- Prometheus ----------------------------------------------------------------------------


def _rendered(tmp_path: Path, port: int = 29090) -> tuple[dict, Path]:
    source_dir = repo_infra_dir() / "prometheus"
    text = render_prometheus_config((source_dir / "prometheus.yml").read_text(), source_dir, port)
    out = tmp_path / "prometheus.yml"
    out.write_text(text)
    return yaml.safe_load(text), out


def test_prometheus_config_scrapes_agents_on_the_port_convention(tmp_path: Path) -> None:
    config, _ = _rendered(tmp_path)
    assert config["global"]["scrape_interval"] == "5s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {
        name: [t for sc in job["static_configs"] for t in sc["targets"]]
        for name, job in jobs.items()
    }
    assert targets["prometheus"] == ["127.0.0.1:29090"]
    for agent, port in METRICS_PORTS.items():
        assert f"127.0.0.1:{port}" in targets[agent], agent
    assert len(targets["ocr-worker"]) == 10
    assert all(Path(p).is_absolute() for p in config["rule_files"])


def test_prometheus_docker_config_has_the_same_jobs() -> None:
    source_dir = repo_infra_dir() / "prometheus"
    local = yaml.safe_load((source_dir / "prometheus.yml").read_text())
    docker = yaml.safe_load((source_dir / "prometheus.docker.yml").read_text())
    # No autoscaler and no API in docker-compose.
    local_jobs = {j["job_name"] for j in local["scrape_configs"]} - {"autoscaler", "api"}
    assert local_jobs == {j["job_name"] for j in docker["scrape_configs"]}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_rendered_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    _, path = _rendered(tmp_path)
    result = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- processes -----------------------------------------------------------------------------


def _wait_for_line(path: Path, text: str) -> None:
    wait_until(lambda: text in path.read_text(), 10, f"{text!r} in {path.name}", interval_s=0.05)


def test_spawn_pidfile_and_terminate(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "sleeper.log"
    p = proc_mod.spawn(
        [sys.executable, "-c", "print('hello', flush=True); import time; time.sleep(60)"], log_path
    )
    try:
        _wait_for_line(log_path, "hello")
        proc_mod.write_pid(tmp_path / "run" / "x.pid", p.pid)
        assert proc_mod.read_pid(tmp_path / "run" / "x.pid") == p.pid
        assert proc_mod.is_alive(p.pid)
        assert proc_mod.cmdline_contains(p.pid, "time.sleep(60)")
        assert proc_mod.terminate(p.pid, timeout_s=10) is False  # stopped by TERM
        assert not proc_mod.is_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_terminate_kills_a_process_that_ignores_term(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    p = proc_mod.spawn([sys.executable, "-c", code], tmp_path / "stubborn.log")
    try:
        _wait_for_line(tmp_path / "stubborn.log", "ready")
        assert proc_mod.terminate(p.pid, timeout_s=0.5) is True  # had to KILL
        assert not proc_mod.is_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_read_pid_of_missing_or_garbage_file(tmp_path: Path) -> None:
    assert proc_mod.read_pid(tmp_path / "none.pid") is None
    (tmp_path / "bad.pid").write_text("not a pid")
    assert proc_mod.read_pid(tmp_path / "bad.pid") is None


# -- the lifecycle, with a stand-in service (a Python HTTP server) --------------------------


class HttpService(Service):
    """A stand-in with the same lifecycle as the real ones: serves the home folder over HTTP."""

    name = "http"

    def __init__(self, settings: ServicesSettings, port: int) -> None:
        super().__init__(settings)
        self.port = port

    @property
    def ports(self) -> Sequence[int]:
        return (self.port,)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> Launch:
        return Launch(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(self.home),
                str(self.port),
            ]
        )

    def probe(self, timeout_s: float) -> str | None:
        try:
            with urllib.request.urlopen(self.address + "/", timeout=timeout_s) as resp:
                return None if resp.status == 200 else f"status {resp.status}"
        except OSError as e:
            return str(e)


@pytest.fixture
def http_service(tmp_path: Path) -> Iterator[HttpService]:
    service = HttpService(
        ServicesSettings(home=tmp_path / "home", start_timeout_s=20), _free_port()
    )
    yield service
    service.stop(timeout_s=5)


def test_up_is_idempotent_and_down_stops_by_pid(http_service: HttpService) -> None:
    first = up([http_service])
    assert first[0].started
    pid = first[0].pid
    assert pid is not None
    assert http_service.pid_file.read_text().strip() == str(pid)

    second = up([http_service])
    assert not second[0].started
    assert second[0].pid == pid

    [st] = status([http_service])
    assert (st.state, st.pid, st.address) == (State.UP, pid, http_service.address)
    assert http_service.log_file.exists()

    assert down([http_service]) == [("http", pid)]
    assert not proc_mod.is_alive(pid)
    assert not http_service.pid_file.exists()
    assert status([http_service])[0].state is State.STOPPED
    assert down([http_service]) == [("http", None)]


def test_a_port_held_by_someone_else_is_a_clear_error(http_service: HttpService) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", http_service.port))
        squatter.listen()
        [st] = status([http_service])
        assert st.state is State.FOREIGN
        with pytest.raises(ServiceError, match=rf"port {http_service.port} is already in use"):
            up([http_service])


def test_a_stale_pid_file_is_ignored(http_service: HttpService) -> None:
    http_service.pid_file.parent.mkdir(parents=True)
    http_service.pid_file.write_text("999999\n")
    assert status([http_service])[0].state is State.STOPPED
    assert up([http_service])[0].started


def test_a_service_that_dies_while_starting_fails_with_its_log(tmp_path: Path) -> None:
    class Crashing(HttpService):
        def launch(self) -> Launch:
            return Launch([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])

    service = Crashing(ServicesSettings(home=tmp_path, start_timeout_s=20), _free_port())
    with pytest.raises(ServiceError, match=r"(?s)exited with status 3.*boom"):
        up([service])


def test_build_services_selects_and_orders(tmp_path: Path) -> None:
    settings = ServicesSettings(home=tmp_path)
    names = [s.name for s in build_services(settings, S3Settings(), ["prometheus", "kafka"])]
    assert names == ["kafka", "prometheus"]
    with pytest.raises(ServiceError, match="unknown service"):
        build_services(settings, S3Settings(), ["zookeeper"])


# -- docker-compose (no Docker daemon here: check its structure) ----------------------------


def test_compose_file_is_consistent() -> None:
    from ocrstream.cli import _COMMANDS

    root = Path(__file__).resolve().parents[2]  # the checkout
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {
        "kafka",
        "minio",
        "prometheus",
        "grafana",
        "topics",
        "splitter",
        "ocr-worker",
        "assembler",
        "lag-exporter",
    } <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on") or []:
            assert dep in services, f"{name} depends on unknown {dep}"
        for volume in svc.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (root / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name} uses undeclared volume {source}"
        if svc.get("build"):
            assert svc["command"][0] in _COMMANDS, f"{name} runs unknown command"
    prometheus_cmd = " ".join(services["prometheus"]["command"])
    assert "/etc/prometheus/prometheus.docker.yml" in prometheus_cmd
    assert (root / "infra/prometheus/prometheus.docker.yml").exists()
    assert (root / "Dockerfile").exists()


def test_cli_status_of_stopped_services(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ocrstream.cli import main

    env = {
        "OCRSTREAM_INFRA_HOME": str(tmp_path),
        "OCRSTREAM_INFRA_KAFKA_PORT": str(_free_port()),
        "OCRSTREAM_INFRA_KAFKA_CONTROLLER_PORT": str(_free_port()),
        "OCRSTREAM_INFRA_S3_PORT": str(_free_port()),
        "OCRSTREAM_INFRA_PROMETHEUS_PORT": str(_free_port()),
    }
    runner = CliRunner()
    result = runner.invoke(main, ["infra", "status"], env=env)
    assert result.exit_code == 1
    states = {line.split()[0]: line.split()[1] for line in result.output.splitlines()[1:4]}
    assert states == {"kafka": "stopped", "s3": "stopped", "prometheus": "stopped"}
    quiet = runner.invoke(main, ["infra", "status", "--quiet"], env=env)
    assert (quiet.exit_code, quiet.output) == (1, "")
    down = runner.invoke(main, ["infra", "down"], env=env)
    assert down.exit_code == 0
    assert down.output.count("not running") == 3
