"""Apache Kafka 4.x, one node in KRaft combined mode (broker + controller), from Maven jars.

The jars come from Maven Central through ``infra/kafka/pom.xml`` (maven-dependency-plugin
copy-dependencies) into ``<cache_dir>/kafka-<version>/libs``, once per version. The storage is
formatted with ``kafka.tools.StorageTool format --standalone`` (a single-voter dynamic quorum)
and the broker runs as ``java -cp 'libs/*' kafka.Kafka server.properties``.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from ocrstream.services import process
from ocrstream.services.base import LOOPBACK, Launch, Service, ServiceError, repo_infra_dir
from ocrstream.settings import ServicesSettings

log = logging.getLogger(__name__)

MESSAGE_MAX_BYTES = 8 * 1024 * 1024
_READY_MARKER = ".complete"


def render_server_properties(settings: ServicesSettings, data_dir: Path) -> str:
    """``server.properties`` for a single-node KRaft cluster on 127.0.0.1."""
    broker = f"{LOOPBACK}:{settings.kafka_port}"
    controller = f"{LOOPBACK}:{settings.kafka_controller_port}"
    props: dict[str, str | int] = {
        # KRaft combined mode: this one process is broker and controller.
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.bootstrap.servers": controller,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{broker},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{broker},CONTROLLER://{controller}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        # One node: every internal topic has one replica.
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 12,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 12,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "num.partitions": 1,
        # Topics are created by `ocrstream topics create`, never by a typo.
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        # Page images up to a few MiB travel inline.
        "message.max.bytes": MESSAGE_MAX_BYTES,
        "replica.fetch.max.bytes": MESSAGE_MAX_BYTES,
        # A dev box: a week at most, small segments so retention frees space early.
        "log.retention.hours": 168,
        "log.segment.bytes": 64 * 1024 * 1024,
        "log.retention.check.interval.ms": 60_000,
        # Two cores.
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "background.threads": 4,
    }
    lines = ["# Rendered by `ocrstream infra up`; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaService(Service):
    name = "kafka"

    @property
    def ports(self) -> Sequence[int]:
        return (self.settings.kafka_port, self.settings.kafka_controller_port)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.settings.kafka_port}"

    @property
    def libs_dir(self) -> Path:
        return self.settings.cache_dir / f"kafka-{self.settings.kafka_version}" / "libs"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def properties_file(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def cluster_id_file(self) -> Path:
        return self.state_dir / "cluster.id"

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise ServiceError(
                "java not found: Kafka 4 needs a Java 17+ runtime "
                "(apt-get install openjdk-17-jre-headless)"
            )
        return java

    def prepare(self) -> None:
        """Fetch the broker jars with Maven into the cache, once per Kafka version."""
        if (self.libs_dir / _READY_MARKER).exists():
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ServiceError(
                "mvn not found: the Kafka jars come from Maven Central (apt-get install maven)"
            )
        pom = repo_infra_dir() / "kafka" / "pom.xml"
        if not pom.exists():
            raise ServiceError(f"{pom} is missing: run `ocrstream infra up` from a source checkout")
        staging = self.libs_dir.with_name("libs.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        build_log = self.home / "logs" / "maven.log"
        build_log.parent.mkdir(parents=True, exist_ok=True)
        log.info("kafka: fetching Kafka %s jars with Maven (once)", self.settings.kafka_version)
        argv = [
            mvn,
            "-B",
            "-q",
            "--no-transfer-progress",
            "-Dstyle.color=never",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-Dkafka.version={self.settings.kafka_version}",
            f"-Dlibs.dir={staging}",
        ]
        with open(build_log, "ab") as out:
            result = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, check=False, cwd=pom.parent
            )
        if result.returncode != 0:
            raise ServiceError(
                f"maven failed ({result.returncode}); see {build_log}:\n{process.tail(build_log)}"
            )
        (staging / _READY_MARKER).write_text(self.settings.kafka_version + "\n", encoding="utf-8")
        shutil.rmtree(self.libs_dir, ignore_errors=True)
        staging.replace(self.libs_dir)

    def _jvm(self, heap: str) -> list[str]:
        log4j2 = repo_infra_dir() / "kafka" / "log4j2.xml"
        return [
            self._java(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j2}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp",
            str(self.libs_dir / "*"),
        ]

    def configure(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(
            render_server_properties(self.settings, self.data_dir), encoding="utf-8"
        )
        if (self.data_dir / "meta.properties").exists():
            return
        if not self.cluster_id_file.exists():
            self.cluster_id_file.write_text(new_cluster_id() + "\n", encoding="utf-8")
        cluster_id = self.cluster_id_file.read_text(encoding="utf-8").strip()
        fmt_log = self.home / "logs" / "kafka-storage.log"
        argv = [
            *self._jvm("256m"),
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "--ignore-formatted",
            "-t",
            cluster_id,
            "-c",
            str(self.properties_file),
        ]
        log.info("kafka: formatting storage %s (cluster %s)", self.data_dir, cluster_id)
        with open(fmt_log, "ab") as out:
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if result.returncode != 0:
            raise ServiceError(
                f"kafka storage format failed; see {fmt_log}:\n{process.tail(fmt_log)}"
            )

    def launch(self) -> Launch:
        argv = [*self._jvm(self.settings.kafka_heap), "kafka.Kafka", str(self.properties_file)]
        return Launch(argv=argv, cwd=self.state_dir)

    def probe(self, timeout_s: float) -> str | None:
        if not process.port_open(LOOPBACK, self.settings.kafka_port):
            return f"port {self.settings.kafka_port} not accepting connections"
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(
            {
                "bootstrap.servers": self.address,
                "log_level": 0,
                "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000)),
            }
        )
        try:
            admin.list_topics(timeout=timeout_s)
            cluster = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s)
        except KafkaException as e:
            return f"admin request failed: {e}"
        except TimeoutError:
            return "describe_cluster timed out"
        expected = self._cluster_id()
        if expected and cluster.cluster_id != expected:
            return f"answers as cluster {cluster.cluster_id}, expected {expected}"
        if not cluster.nodes:
            return "no brokers registered yet"
        return self._probe_group_coordinator(timeout_s)

    def _probe_group_coordinator(self, timeout_s: float) -> str | None:
        """Up means consumer groups work too: the first group request on new storage creates
        __consumer_offsets, and until its partitions have leaders every group call fails (some
        librdkafka admin calls even crash on the NOT_COORDINATOR answers of that window)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.address,
                "group.id": "ocrstream-infra-probe",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        try:
            consumer.committed([TopicPartition("ocrstream-infra-probe", 0)], timeout=timeout_s)
        except KafkaException as e:
            return f"group coordinator not ready: {e}"
        finally:
            consumer.close()
        return None

    def _cluster_id(self) -> str | None:
        try:
            return self.cluster_id_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
