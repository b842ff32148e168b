"""Security properties of ocrstream (see docs/security.md), checked without a broker.

- Credentials come only from settings (the environment), are masked in every repr, and never
  reach the logs: not the agents' startup logs, not librdkafka's.
- Kafka SASL/TLS and S3 TLS: the settings render the client configurations that use them.
- No pickle (or marshal, shelve …) anywhere in the package, and faust serializes nothing with it.
- Object keys are built in one place, only from validated ids.
- Every size the outside world controls has a limit, and docs/security.md lists each one.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import certifi
import pytest

from ocrstream.errors import InvalidDocIdError
from ocrstream.settings import (
    AssemblerSettings,
    KafkaSettings,
    LimitsSettings,
    S3Settings,
    SplitterSettings,
    WorkerSettings,
)
from ocrstream.storage import Keys, ObjectStore, validate_doc_id
from ocrstream.storage.keys import InvalidUriError, parse_s3_uri
from ocrstream.streams.metrics import Metrics
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ocrstream"
SECURITY_MD = REPO / "docs" / "security.md"

SECRETS = {
    "OCRSTREAM_KAFKA_SASL_PASSWORD": "kafka-sasl-pw-5f1e",
    "OCRSTREAM_KAFKA_SSL_KEY_PASSWORD": "kafka-key-pw-77c2",
    "OCRSTREAM_KAFKA_EXTRA": '{"sasl.oauthbearer.client.secret": "oauth-secret-a9d3"}',
    "OCRSTREAM_SCHEMA_REGISTRY_URL": "https://reg-user:registry-pw-31b8@127.0.0.1:1",
    "OCRSTREAM_S3_ACCESS_KEY": "s3-access-key-0c4b",
    "OCRSTREAM_S3_SECRET_KEY": "s3-secret-key-e6a0",
}
SECRET_VALUES = ("kafka-sasl-pw-5f1e", "kafka-key-pw-77c2", "oauth-secret-a9d3",
                 "registry-pw-31b8", "s3-access-key-0c4b", "s3-secret-key-e6a0")  # fmt: skip


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OCRSTREAM_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("OCRSTREAM_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("OCRSTREAM_KAFKA_SASL_USERNAME", "ocr")


# --- credentials ------------------------------------------------------------------------------


def test_credentials_come_from_the_environment_and_are_masked(secret_env: None) -> None:
    kafka, s3 = KafkaSettings(), S3Settings()
    conf = kafka.librdkafka()
    assert conf["sasl.password"] == SECRETS["OCRSTREAM_KAFKA_SASL_PASSWORD"]
    assert conf["ssl.key.password"] == SECRETS["OCRSTREAM_KAFKA_SSL_KEY_PASSWORD"]
    assert conf["sasl.oauthbearer.client.secret"] == "oauth-secret-a9d3"
    assert s3.secret_key.get_secret_value() == SECRETS["OCRSTREAM_S3_SECRET_KEY"]
    shown = " ".join(
        [repr(kafka), str(kafka), kafka.model_dump_json(), repr(kafka.model_dump()),
         repr(s3), str(s3), s3.model_dump_json(), repr(ObjectStore(s3))]
    )  # fmt: skip
    for secret in SECRET_VALUES:
        assert secret not in shown
    assert "127.0.0.1:1" in shown  # the registry is still named, without its credentials


def test_nothing_reads_the_environment_by_hand() -> None:
    """Settings models read ``OCRSTREAM_…``; other code may only pass the environment on to a
    child process (``{**os.environ, …}``), never pick a value out of it."""
    found = []
    for path, tree in _modules():
        if path.name == "settings.py":
            continue
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, ast.Subscript | ast.Call) else ""
            if re.match(r"os\.(environ\[|environ\.get\(|getenv\()", text):
                found.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}: {text}")
    assert not found, found


def test_librdkafka_and_faust_clients_never_log_credentials(
    secret_env: None, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Clients with SASL_SSL credentials against a port where nothing listens: they try,
    fail and log about it (librdkafka on stderr, faust/aiokafka through logging), without a
    secret in any line."""
    from confluent_kafka import Consumer, Producer

    from ocrstream.streams.app import credentials, make_app

    caplog.set_level("DEBUG")
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", ssl_ca_location=certifi.where())
    producer = Producer(kafka.librdkafka(log_level=7, debug="conf,security,broker"))
    consumer = Consumer(kafka.librdkafka(**{"group.id": "g", "log_level": 7}))
    producer.poll(1.0)
    consumer.poll(0.5)
    consumer.close()
    app = make_app("security-test", kafka, partitions=1)
    shown = f"{app.conf.broker_credentials!r} {credentials(kafka)!r} {app.conf.broker!r}"
    out, err = capfd.readouterr()
    assert "127.0.0.1:1" in err  # librdkafka did talk
    for secret in SECRET_VALUES:
        assert secret not in out + err + caplog.text + shown


@pytest.mark.parametrize("agent", ["splitter", "assembler", "ocr-worker"])
def test_agents_startup_logs_hold_no_credentials(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each agent started at DEBUG with every credential set and nothing to connect to: it
    logs its start and its failure to reach the store, and exits — without a secret."""
    env = {
        **os.environ, **SECRETS,
        "OCRSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "OCRSTREAM_KAFKA_SASL_MECHANISM": "PLAIN",
        "OCRSTREAM_KAFKA_SASL_USERNAME": "ocr",
        "OCRSTREAM_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "OCRSTREAM_S3_ENDPOINT": "127.0.0.1:1",
        "OCRSTREAM_S3_RETRIES": "0",
        "OCRSTREAM_LOG_LEVEL": "DEBUG",
    }  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "ocrstream", agent, "--metrics-port", "0"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Connection refused" in output  # it did try, and said so
    for secret in SECRET_VALUES:
        assert secret not in output, f"{agent} printed a credential"


# --- SASL and TLS ------------------------------------------------------------------------------


def test_kafka_sasl_ssl_renders_for_librdkafka() -> None:
    kafka = KafkaSettings(
        bootstrap_servers="broker-1:9093,broker-2:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="ocr",
        sasl_password="pw",
        ssl_ca_location="/etc/ssl/ca.pem",
        ssl_certificate_location="/etc/ssl/client.pem",
        ssl_key_location="/etc/ssl/client.key",
        ssl_key_password="kpw",
    )
    conf = kafka.librdkafka()
    assert conf == {
        "bootstrap.servers": "broker-1:9093,broker-2:9093",
        "client.id": kafka.client_id,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "ocr",
        "sasl.password": "pw",
        "ssl.ca.location": "/etc/ssl/ca.pem",
        "ssl.certificate.location": "/etc/ssl/client.pem",
        "ssl.key.location": "/etc/ssl/client.key",
        "ssl.key.password": "kpw",
        "ssl.endpoint.identification.algorithm": "https",
    }
    off = KafkaSettings(security_protocol="SSL", ssl_endpoint_identification=False)
    assert off.librdkafka()["ssl.endpoint.identification.algorithm"] == "none"
    plain = KafkaSettings().librdkafka()
    assert plain["security.protocol"] == "PLAINTEXT"
    assert not any(k.startswith(("sasl.", "ssl.")) for k in plain)


def test_librdkafka_accepts_the_sasl_ssl_configuration() -> None:
    from confluent_kafka import Consumer, Producer

    from ocrstream.streams.producer import producer_config
    from ocrstream.streams.worker import consumer_config

    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_SSL",
                          sasl_mechanism="SCRAM-SHA-256", sasl_username="u",
                          sasl_password="p", ssl_ca_location=certifi.where())  # fmt: skip
    Producer(producer_config(kafka)).flush(0)
    Consumer(consumer_config(kafka, WorkerSettings())).close()


def test_faust_agents_get_the_same_sasl_and_tls() -> None:
    import faust

    from ocrstream.streams.app import credentials

    assert credentials(KafkaSettings()) is None
    sasl = credentials(KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                                     sasl_username="u", sasl_password="p",
                                     ssl_ca_location=certifi.where()))  # fmt: skip
    assert isinstance(sasl, faust.SASLCredentials)
    mechanism = getattr(sasl.mechanism, "value", sasl.mechanism)
    assert (sasl.username, sasl.password, mechanism) == ("u", "p", "SCRAM-SHA-512")
    assert isinstance(sasl.ssl_context, ssl.SSLContext)
    assert sasl.ssl_context.verify_mode is ssl.CERT_REQUIRED
    assert sasl.ssl_context.check_hostname
    tls = credentials(KafkaSettings(security_protocol="SSL", ssl_ca_location=certifi.where(),
                                    ssl_endpoint_identification=False))  # fmt: skip
    assert isinstance(tls, faust.SSLCredentials)
    assert not tls.context.check_hostname
    assert tls.context.verify_mode is ssl.CERT_REQUIRED


def test_s3_tls_verifies_certificates() -> None:
    from ocrstream.storage.objectstore import make_client

    https = make_client(S3Settings(endpoint="https://s3.example.com", ca_bundle=certifi.where()))
    assert https._base_url.is_https
    pool = https._http.connection_pool_kw
    assert (pool["cert_reqs"], pool["ca_certs"]) == ("CERT_REQUIRED", certifi.where())
    assert make_client(S3Settings(endpoint="s3.example.com:9000", secure=True))._base_url.is_https
    assert not make_client(S3Settings())._base_url.is_https  # the local store: plain HTTP


@pytest.mark.integration
def test_s3_over_tls_round_trip(tmp_path: Path) -> None:
    """A TLS S3 endpoint (versitygw with a self-signed certificate): objects go and come back
    with ``ca_bundle`` set to that certificate, and without it the store refuses to talk."""
    from ocrstream.services.s3 import S3Service
    from ocrstream.settings import ServicesSettings
    from ocrstream.storage import StoreConfigError

    binary = S3Service(ServicesSettings(), S3Settings()).binary
    if not binary.exists():
        pytest.skip("versitygw is not built (ocrstream infra up)")
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    from tests.integration.harness import free_port

    port = free_port()
    (tmp_path / "data").mkdir()
    s3 = S3Settings(endpoint=f"https://127.0.0.1:{port}", ca_bundle=str(cert), bucket="tls-test",
                    retries=0)  # fmt: skip
    env = {"ROOT_ACCESS_KEY_ID": s3.access_key.get_secret_value(),
           "ROOT_SECRET_ACCESS_KEY": s3.secret_key.get_secret_value()}  # fmt: skip
    argv = [str(binary), "--port", f"127.0.0.1:{port}", "--cert", str(cert), "--key", str(key),
            "--quiet", "posix", str(tmp_path / "data")]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        store = ObjectStore(s3)

        def answers() -> bool:
            store.ensure_bucket()
            return True

        wait_until(answers, 30, "the TLS store to answer", interval_s=0.3, ignoring=(Exception,))
        store.put_bytes("documents/x/document.txt", b"over TLS")
        assert store.get_bytes("documents/x/document.txt") == b"over TLS"
        unverified = ObjectStore(s3.model_copy(update={"ca_bundle": None}))
        with pytest.raises(StoreConfigError, match="TLS"):
            unverified.get_bytes("documents/x/document.txt")
    finally:
        proc.terminate()
        proc.wait(10)


# --- no pickle --------------------------------------------------------------------------------

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                  "joblib", "jsonpickle"}  # fmt: skip


def test_no_pickle_anywhere_in_the_package() -> None:
    found = []
    for path, tree in _modules():
        where = path.relative_to(REPO)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] in UNSAFE_MODULES for n in names):
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: import {names}")
            if isinstance(node, ast.Call):
                call = ast.unparse(node.func)
                kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if call in ("yaml.load", "yaml.unsafe_load", "yaml.full_load"):
                    found.append(f"{where}:{node.lineno}: {call}")
                if call in ("np.load", "numpy.load") and kwargs.get("allow_pickle") == "True":
                    found.append(f"{where}:{node.lineno}: {call}(allow_pickle=True)")
                if call == "torch.load" and kwargs.get("weights_only") != "True":
                    found.append(f"{where}:{node.lineno}: torch.load without weights_only")
            if isinstance(node, ast.Constant) and node.value in ("pickle", "binary|pickle"):
                found.append(f"{where}:{node.lineno}: serializer {node.value!r}")
    assert not found, found


def test_faust_serializes_nothing_with_pickle() -> None:
    """Topics are raw bytes (our Avro codec decodes them), tables and changelogs json.
    The apps are built, not run: no broker is asked for partitions or topics."""
    import ocrstream.streams.assembler as assembler
    import ocrstream.streams.splitter as splitter

    kafka = KafkaSettings(topic_prefix="security-")
    store = ObjectStore(S3Settings())
    with mock.patch.object(splitter, "topic_partitions", return_value=4), \
         mock.patch.object(assembler, "topic_partitions", return_value=4), \
         mock.patch.object(splitter, "declare_internal_topics"), \
         mock.patch.object(assembler, "declare_internal_topics"):  # fmt: skip
        apps = [
            splitter.build_splitter(kafka, store, SplitterSettings(), LimitsSettings(), Metrics()),
            assembler.build_assembler(kafka, store, AssemblerSettings(), LimitsSettings(),
                                      Metrics(), dpi=200),
        ]  # fmt: skip
    for app in apps:
        assert (app.conf.key_serializer, app.conf.value_serializer) == ("raw", "json")
        assert app.agents
        for agent in app.agents.values():
            assert (agent.channel.key_serializer, agent.channel.value_serializer) == ("raw", "raw")
        assert app.tables
        for table in app.tables.values():
            for serializer in (table.key_serializer, table.value_serializer,
                               table.changelog_topic.key_serializer,
                               table.changelog_topic.value_serializer):  # fmt: skip
                assert serializer in ("json", "raw"), (table.name, serializer)


# --- object keys --------------------------------------------------------------------------------

BAD_DOC_IDS = ("../x", "..", ".", "a/b", "a\\b", "", "x" * 129, "nul\x00", "cr\r", "esc\x1b",
               "ü", "a b", "%2e%2e", "a..b")  # fmt: skip


@pytest.mark.parametrize("doc_id", BAD_DOC_IDS, ids=ascii)
def test_keys_are_built_only_from_valid_doc_ids(doc_id: str) -> None:
    keys = Keys("tenant-a/")
    for build in (lambda: keys.source(doc_id, "pdf"), lambda: keys.page(doc_id, 1, "png"),
                  lambda: keys.document(doc_id, "json"), lambda: keys.pages_prefix(doc_id),
                  lambda: keys.documents_prefix(doc_id)):  # fmt: skip
        with pytest.raises(InvalidDocIdError) as info:
            build()
        assert str(info.value).isprintable()


def test_keys_take_nothing_else_unchecked() -> None:
    keys = Keys()
    assert keys.page("doc-1", 7, "PNG") == "pages/doc-1/00007.png"
    for bad in (lambda: keys.page("d", 0, "png"), lambda: keys.page("d", 100_000, "png"),
                lambda: keys.source("d", "../pdf"), lambda: keys.source("d", "p/df"),
                lambda: keys.document("d", "html"), lambda: Keys("a/../b")):  # fmt: skip
        with pytest.raises(ValueError):  # noqa: PT011 -- each says what is wrong
            bad()
    assert validate_doc_id("A-z_0.9") == "A-z_0.9"
    for uri in ("s3://../../etc/passwd", "http://169.254.169.254/", "s3://b", "s3://bucket/a\n"):
        with pytest.raises(InvalidUriError):
            parse_s3_uri(uri)


def test_object_keys_are_built_in_one_place() -> None:
    """No module but storage/keys.py spells the layout's prefixes: every key comes from
    :class:`Keys`, which validates what goes into it."""
    layout = re.compile(r"^(scans|pages|documents)/($|\S*/)")  # "pages/{…}", "pages/x/…"
    found = []
    for path, tree in _modules():
        if path.relative_to(PACKAGE).as_posix() == "storage/keys.py":
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and layout.match(node.value)):  # fmt: skip
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not found, found


# --- limits -------------------------------------------------------------------------------------


def test_every_limit_is_documented() -> None:
    """docs/security.md lists every size limit with the setting that changes it."""
    text = SECURITY_MD.read_text()
    settings = [f"OCRSTREAM_LIMIT_{name.upper()}" for name in LimitsSettings.model_fields]
    settings += ["OCRSTREAM_WORKER_MAX_INFLIGHT_PAGES", "OCRSTREAM_WORKER_MAX_INFLIGHT_PIXELS",
                 "OCRSTREAM_OCR_MAX_PAGE_PIXELS"]  # fmt: skip
    missing = [name for name in settings if name not in text]
    assert not missing, f"docs/security.md does not mention {missing}"
    for term in ("doc_id", "pickle", "SASL_SSL", "OCRSTREAM_S3_CA_BUNDLE", "max.message.bytes"):
        assert term in text


def test_scan_sources_come_only_from_allowed_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrstream.settings import SplitterSettings
    from ocrstream.streams.splitter import source_bucket_allowed

    assert SplitterSettings().source_buckets == ()
    assert source_bucket_allowed("ocrstream", "ocrstream", ())
    assert not source_bucket_allowed("payroll", "ocrstream", ())
    monkeypatch.setenv("OCRSTREAM_SPLITTER_SOURCE_BUCKETS", '["scans-in"]')
    allowed = SplitterSettings().source_buckets
    assert allowed == ("scans-in",)
    assert source_bucket_allowed("scans-in", "ocrstream", allowed)
    assert not source_bucket_allowed("payroll", "ocrstream", allowed)
    assert source_bucket_allowed("payroll", "ocrstream", ("*",))
