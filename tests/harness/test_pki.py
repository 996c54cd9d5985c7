"""The test control plane's certificates, read back as the API server and kubelet read them.

A new machine installs the newest `cryptography`; 51.0 refused the empty SAN list the
kubelet client certificate was built with, and every test on a control plane errored.
These pin down what each certificate must say, whatever the library's version.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtensionOID, NameOID

from clusterpki import IN_CLUSTER_NAMES, KUBERNETES_SERVICE_IP, write_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    write_pki(root, "10.0.0.7")
    return root


def _cert(pki: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((pki / name).read_bytes())


def _names(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ({str(ip) for ip in san.get_values_for_type(x509.IPAddress)},
            set(san.get_values_for_type(x509.DNSName)))


def test_the_serving_certificate_names_loopback_the_node_address_and_the_service(
        pki: Path) -> None:
    ips, dns = _names(_cert(pki, "server.crt"))
    assert ips == {"127.0.0.1", "10.0.0.7", KUBERNETES_SERVICE_IP}
    assert dns == {"localhost", *IN_CLUSTER_NAMES}
    ipaddress.ip_address(KUBERNETES_SERVICE_IP)  # a literal address, not a name


def test_the_kubelet_client_certificate_names_a_user_and_group_and_no_host(pki: Path) -> None:
    client = _cert(pki, "kubelet-client.crt")
    subject = {a.oid: a.value for a in client.subject}
    assert subject == {NameOID.COMMON_NAME: "kube-apiserver-kubelet-client",
                       NameOID.ORGANIZATION_NAME: "system:masters"}
    oids = {e.oid for e in client.extensions}
    assert ExtensionOID.SUBJECT_ALTERNATIVE_NAME not in oids  # none, rather than an empty one


@pytest.mark.parametrize("name", ["server.crt", "kubelet-client.crt"])
def test_each_certificate_is_signed_by_the_ca(pki: Path, name: str) -> None:
    ca, cert = _cert(pki, "ca.crt"), _cert(pki, name)
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
