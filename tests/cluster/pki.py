"""The cluster's certificates and keys, made with openssl: one CA, the API server's serving certificate, one
client certificate in system:masters (every component and the tests use it), the service-account key pair."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


@dataclass(frozen=True)
class Pki:
    ca: Path
    ca_key: Path
    apiserver: Path
    apiserver_key: Path
    admin: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {done.stderr.strip()[-400:]}")


def _signed(directory: Path, name: str, subject: str, extensions: str, ca: Path, ca_key: Path) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", DAYS, "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=directory)


def make(directory: Path, *addresses: str) -> Pki:
    """A CA, the API server's certificate for localhost and ``addresses``, the admin's, the service account keys."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS, "-subj", "/CN=mokka-cluster-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    names = ",".join(["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                      "IP:127.0.0.1", *(f"IP:{address}" for address in addresses)])
    _signed(directory, "apiserver", "/CN=kube-apiserver",
            f"subjectAltName={names}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n", ca, ca_key)
    _signed(directory, "admin", "/O=system:masters/CN=mokka-cluster-admin",
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n", ca, ca_key)
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return Pki(ca=ca, ca_key=ca_key, apiserver=directory / "apiserver.crt", apiserver_key=directory / "apiserver.key",
               admin=directory / "admin.crt", admin_key=directory / "admin.key",
               service_account_key=directory / "sa.key", service_account_pub=directory / "sa.pub")


def kubeconfig(pki: Pki, server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: mokka
  cluster: {{certificate-authority: {pki.ca}, server: "{server}"}}
users:
- name: admin
  user: {{client-certificate: {pki.admin}, client-key: {pki.admin_key}}}
contexts:
- name: mokka
  context: {{cluster: mokka, user: admin}}
current-context: mokka
"""
