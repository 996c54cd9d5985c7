"""The test control plane's certificates: a CA, the API server's serving certificate (its
in-cluster names and the Service address included), a kubelet client certificate, and the
service-account signing keys, made fresh for each run."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# The names a pod may use for the API server (the `kubernetes` Service), when pods run.
IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the first address of --service-cluster-ip-range


def _certificate(subject: str, key: rsa.RSAPrivateKey, *, issuer: x509.Certificate | None,
                 issuer_key: rsa.RSAPrivateKey, ca: bool, ips: tuple[str, ...] = ("127.0.0.1",),
                 names: tuple[str, ...] = ("localhost",), group: str | None = None
                 ) -> x509.Certificate:
    now = datetime.datetime.now(tz=datetime.UTC)
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    if group:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
    name = x509.Name(attributes)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    alternative: list[x509.GeneralName] = [
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
        *(x509.DNSName(n) for n in names)]
    # a certificate that names no host (a client's) has no SAN at all: RFC 5280 forbids an
    # empty one, and cryptography refuses to build it from 51 on
    if not ca and alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write_pki(pki: Path, address: str = "127.0.0.1") -> None:
    """A CA, the API server's serving certificate and the service-account key pair.

    The serving certificate names loopback, ``address`` and the `kubernetes` Service's
    address and names (what pods connect to); the CA also signs the client certificate the
    API server shows kubelets (for logs, exec and port-forward).
    """
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, server_key, sa_key, client_key = _key(), _key(), _key(), _key()
    ca = _certificate("llmop-test-ca", ca_key, issuer=None, issuer_key=ca_key, ca=True)
    server = _certificate("kube-apiserver", server_key, issuer=ca, issuer_key=ca_key, ca=False,
                          ips=tuple(dict.fromkeys(("127.0.0.1", address,
                                                   KUBERNETES_SERVICE_IP))),
                          names=("localhost", *IN_CLUSTER_NAMES))
    client = _certificate("kube-apiserver-kubelet-client", client_key, issuer=ca,
                          issuer_key=ca_key, ca=False, ips=(), names=(),
                          group="system:masters")
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (pki / "server.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (pki / "server.key").write_bytes(_pem_key(server_key))
    (pki / "kubelet-client.crt").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (pki / "kubelet-client.key").write_bytes(_pem_key(client_key))
    (pki / "sa.key").write_bytes(_pem_key(sa_key))
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
