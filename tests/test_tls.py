"""TLS (statestore.tls) with the secret: a controller and nodes started with the application's certificate, key and
CA replicate and answer status over mutual TLS; a plaintext client, a client that trusts another CA, and a client
whose certificate another CA signed are all refused by the controller and by the nodes; bad TLS settings are
refused naming them."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_node_harness import Cluster, Primary, replica_digest, running_cluster, wait_until

from spark_provider import SettingError, enable
from statestore import auth, tls
from statestore.rpc import control_pb2, control_pb2_grpc

SECRET = "fedcba9876543210" * 4


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key) PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def make_leaf(directory: Path, name: str, ca: tuple[Path, Path]) -> tls.TlsFiles:
    """A certificate for 127.0.0.1 and localhost signed by `ca`, with its key, trusting `ca`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_cert = x509.load_pem_x509_certificate(ca[0].read_bytes())
    ca_key = serialization.load_pem_private_key(ca[1].read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tls.TlsFiles(cert_path, key_path, ca[0])


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, tls.TlsFiles]:
    """The application's files, and a stranger's (another CA, a certificate it signed, trusting it)."""
    application, other = make_ca(tmp_path, "application-ca"), make_ca(tmp_path, "other-ca")
    return {
        "application": make_leaf(tmp_path, "application", application),
        "stranger": make_leaf(tmp_path, "stranger", other),
    }


@pytest.fixture
def tls_cluster(tmp_path: Path, pki: dict[str, tls.TlsFiles], monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    files = pki["application"]
    for name, value in ((tls.CERT_ENV, files.cert), (tls.KEY_ENV, files.key), (tls.CA_ENV, files.ca)):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)
    with running_cluster(tmp_path, ("a", "b"), 1) as cluster:
        yield cluster


def status_with(channel: grpc.Channel) -> control_pb2.StatusReply:
    return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)


def test_replication_and_status_work_over_mutual_tls(tls_cluster: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, "0/1/default", tls_cluster.addresses["a"])
    try:
        for result in primary.commit_and_ship(5, sync=True):
            assert result.synced, result
        last = primary.store.version
        wait_until(lambda: tls_cluster.held("b", "0/1/default") == last, what="b holds the last version")
        assert replica_digest(tls_cluster.data_dir("b"), "0/1/default") == (last, primary.digest())
    finally:
        primary.close()
    assert all(n.alive for n in tls_cluster.status().nodes)


def test_plaintext_and_strangers_are_refused_by_the_controller_and_the_nodes(
    tls_cluster: Cluster, pki: dict[str, tls.TlsFiles]
) -> None:
    application, stranger = pki["application"], pki["stranger"]
    trusts_other_ca = tls.TlsFiles(application.cert, application.key, stranger.ca)  # the server is not trusted
    signed_by_other_ca = tls.TlsFiles(stranger.cert, stranger.key, application.ca)  # the client is not trusted
    for address in (tls_cluster.controller_address, tls_cluster.addresses["a"]):
        for attempt in (
            lambda a=address: grpc.insecure_channel(a),
            lambda a=address: auth.channel(a, tls_files=trusts_other_ca),
            lambda a=address: auth.channel(a, tls_files=signed_by_other_ca),
        ):
            with attempt() as channel, pytest.raises(grpc.RpcError) as error:
                status_with(channel)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE, (address, error.value.details())
    with auth.channel(tls_cluster.controller_address, tls_files=application) as channel:
        assert status_with(channel).nodes


def test_tls_settings_that_cannot_be_used_are_refused_naming_them(pki: dict[str, tls.TlsFiles], tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    files = pki["application"]
    with pytest.raises(SettingError, match=r"tls_cert, tls_key, tls_ca: TLS needs both a certificate and its key"):
        enable(SparkSession.builder.master("local[1]"), tls_cert=str(files.cert))
    with pytest.raises(SettingError, match=rf"TLS file {tmp_path}/missing.pem does not exist"):
        enable(SparkSession.builder.master("local[1]"), tls_cert=str(files.cert), tls_key=str(tmp_path / "missing.pem"))
    with pytest.raises(tls.TlsError, match="environment STATESTORE_TLS_"):
        tls.TlsFiles.of(None, str(files.key), None, "environment STATESTORE_TLS_*")
