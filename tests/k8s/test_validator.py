"""The GPU Operator's validator (``nvidia-validator`` of gpu-operator v26.7.0, kept in ``../shared/consumers``) inside
``mokka run``, as its init containers run it on every GPU node.

Its pod mounts the host's root at ``/host``: here the command runs chrooted into a root that is the node's ``/``
plus ``/host`` (the same ``/``), built on a private tmpfs, so nothing it writes (``/host-dev-char``, its status
directory) reaches the machine. What each component checks is the validator's own code
(cmd/nvidia-validator/main.go): ``driver`` finds ``/host/usr/bin/nvidia-smi`` and runs ``chroot /host nvidia-smi``,
``toolkit`` runs ``nvidia-smi``, ``nvidia-fs``/``gdrcopy``/``nvidia-peermem`` grep lsmod for ``nvidia_fs``,
``^gdrdrv\\s`` and ``^nvidia_peermem\\s``. Expected outcomes are a real node's: a healthy driver install passes,
a GPU that fell off the bus fails nvidia-smi (exit 15, "GPU is lost") and so the driver check; a module check
passes exactly where the module is loaded; ``mofed`` (with the host's MOFED) greps lsmod for ``mlx5_core`` where the
node is labelled as having a Mellanox device, and is skipped elsewhere. ``mofed`` asks the API server for that label:
it is run with a stand-in of the API server that answers the node's labels (NFD's ``pci-15b3.present`` where the node
has Mellanox HCAs), as the validator's pod reaches it through its service account.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml
from boards import PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import builtin_path
from mokka_core.testing.consumers import apt_tool, shared_binary

pytestmark = pytest.mark.consumer

#: ``sh HOSTROOT WORKDIR CMD...``: CMD chrooted into this namespace's / with / again at /host (the validator pod's
#: host-root mount); every mount on a tmpfs at WORKDIR, in mokka run's private namespace
HOSTROOT = """
set -e
w=$1; shift
mount -t tmpfs validator "$w"
for entry in /*; do
  name=${entry#/}
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$w/$name"
  elif [ -d "$entry" ]; then mkdir "$w/$name"; mount --rbind "$entry" "$w/$name"
  fi
done
mkdir "$w/host"; mount --rbind / "$w/host"
if [ -n "${SERVICE_ACCOUNT:-}" ]; then  # the pod's service account (/var/run is /run), on a tmpfs of its own
  mount -t tmpfs secrets "$w/run"
  mkdir -p "$w/run/secrets/kubernetes.io/serviceaccount"
  cp "$SERVICE_ACCOUNT"/* "$w/run/secrets/kubernetes.io/serviceaccount/"
fi
exec chroot "$w" "$@"
"""
#: its status directory (the pod's /run/nvidia/validations hostPath), on the private root's tmpfs
STATUS = "/validations"


@pytest.fixture(scope="module")
def validator(real_node: None) -> Path:
    apt_tool("lsmod", "kmod")  # the module checks run `lsmod | grep`
    return shared_binary("nvidia-validator")


def validate(validator: Path, profile: str | Path, component: str, tmp_path: Path, before: str = "",
             env: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """Run ``--component COMPONENT`` (after the shell command ``before``): its exit status, output and the status
    files it left (name -> content)."""
    script, work, out = tmp_path / "hostroot.sh", tmp_path / "root", tmp_path / "status"
    script.write_text(HOSTROOT)
    work.mkdir()
    command = (f"{before} sh {script} {work} {validator} --component {component} --output-dir {STATUS} "
               f"--disable-dev-char-symlink-creation; rc=$?; mkdir -p {out}; cp -r {work}{STATUS}/. {out}/ "
               f"2>/dev/null; exit $rc")
    done = mokka_run(profile, "sh", "-c", command, env=None if env is None else {**os.environ, **env})
    files = {path.name: path.read_text() for path in out.iterdir()} if out.is_dir() else {}
    return done.returncode, done.stdout + done.stderr, files


@pytest.mark.parametrize("profile", PROFILES)
def test_driver_passes_on_every_healthy_node(validator: Path, profile: str, tmp_path: Path) -> None:
    rc, output, files = validate(validator, profile, "driver", tmp_path)
    assert rc == 0, output[-3000:]
    assert "Detected a pre-installed driver on the host" in output
    # what the validator tells the operator's later pods: a host driver at /, seen at /host
    assert files["driver-ready"].splitlines() == [
        "IS_HOST_DRIVER=true", "NVIDIA_DRIVER_ROOT=/", "DRIVER_ROOT_CTR_PATH=/host", "NVIDIA_DEV_ROOT=/",
        "DEV_ROOT_CTR_PATH=/host"]


def test_driver_fails_with_a_gpu_fallen_off_the_bus(validator: Path, tmp_path: Path) -> None:
    lose = "nvml-mock-ctl fail 2 fallen-off-bus >/dev/null;"
    rc, output, files = validate(validator, "h100", "driver", tmp_path, lose)
    assert rc != 0 and "driver-ready" not in files
    # nvidia-smi's own words and exit status for a lost GPU (NVML_ERROR_GPU_IS_LOST)
    assert "GPU is lost" in output and "No pre-installed driver detected on the host: exit status 15" in output


def test_toolkit_passes_where_nvidia_smi_runs(validator: Path, tmp_path: Path) -> None:
    rc, output, files = validate(validator, "h100", "toolkit", tmp_path)
    assert rc == 0 and "toolkit-ready" in files, output[-3000:]


def gpudirect_profile(tmp_path: Path) -> Path:
    """h100 with every GPUDirect module loaded (system.gpudirect)."""
    document = yaml.safe_load(builtin_path("h100").read_text())
    document["system"]["gpudirect"] = {"rdma": True, "storage": True, "gdrcopy": True}
    path = tmp_path / "h100-gpudirect.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


#: the module each component's lsmod check looks for, and its status file
MODULE_CHECKS = {"nvidia-fs": ("storage", "nvidia-fs-ready"), "gdrcopy": ("gdrcopy", "gdrcopy-ready"),
                 "nvidia-peermem": ("rdma", "nvidia-peermem-ready")}


@pytest.mark.parametrize("component", sorted(MODULE_CHECKS))
@pytest.mark.parametrize("profile", ["h100", "l40s", "gb200", "gpudirect"])
def test_gpudirect_checks_pass_exactly_where_the_module_is_loaded(validator: Path, component: str, profile: str,
                                                                  tmp_path: Path) -> None:
    from mokka_core.model.spec import NodeSpec

    chosen: str | Path = gpudirect_profile(tmp_path) if profile == "gpudirect" else profile
    spec = NodeSpec(profile_file=chosen) if isinstance(chosen, Path) else NodeSpec(profile=chosen)
    node = spec.resolve()
    field, ready = MODULE_CHECKS[component]
    loaded = getattr(node.system.gpudirect, field) and (field != "rdma" or bool(node.hcas))
    rc, output, files = validate(validator, chosen, component, tmp_path)
    assert (rc == 0) == loaded and (ready in files) == loaded, output[-3000:]


#: NFD's label of a node with a Mellanox PCI device (the GPU Operator's NFD configuration labels by vendor)
MELLANOX_LABEL = "feature.node.kubernetes.io/pci-15b3.present"


class ApiServer:
    """The API server's ``GET /api/v1/nodes/<name>`` over TLS for one node, and the service account to reach it."""

    def __init__(self, directory: Path, node: dict) -> None:
        directory.mkdir()
        self.account = directory / "serviceaccount"
        self.account.mkdir()
        key, cert = directory / "key.pem", self.account / "ca.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(cert)], check=True, capture_output=True)
        (self.account / "token").write_text("mokka-test-token")
        (self.account / "namespace").write_text("gpu-operator")
        body = json.dumps(node).encode()
        path = f"/api/v1/nodes/{node['metadata']['name']}"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path.split("?")[0] == path
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if found else b'{"kind":"Status","code":404}')

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def env(self, node_name: str) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server.server_port),
                "SERVICE_ACCOUNT": str(self.account), "NODE_NAME": node_name}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("profile", ["h100", "gb200", "l40s"])
def test_mofed_passes_where_the_node_has_hcas_and_is_skipped_elsewhere(validator: Path, profile: str,
                                                                         tmp_path: Path) -> None:
    """With GPUDirect RDMA and the host's MOFED (GPU_DIRECT_RDMA_ENABLED, USE_HOST_MOFED), as the operator sets
    them for its mofed init container."""
    from mokka_core.model.spec import NodeSpec

    hcas = bool(NodeSpec(profile=profile).resolve().hcas)
    labels = {MELLANOX_LABEL: "true"} if hcas else {}
    api = ApiServer(tmp_path / "api", {"apiVersion": "v1", "kind": "Node",
                                       "metadata": {"name": "gpu-node-7", "labels": labels}})
    try:
        rc, output, files = validate(validator, profile, "mofed", tmp_path, env={
            **api.env("gpu-node-7"), "GPU_DIRECT_RDMA_ENABLED": "true", "USE_HOST_MOFED": "true"})
    finally:
        api.stop()
    assert rc == 0, output[-3000:]
    assert ("mofed-ready" in files) == hcas, output[-3000:]
    if not hcas:
        assert "No Mellanox device label found, skipping MOFED driver validation" in output
