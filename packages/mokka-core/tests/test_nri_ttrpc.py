"""The plugin against containerd's own ttrpc library: a Go runtime stand-in built from Debian's ttrpc package.

``nri_runtime_check/main.go`` serves ``Runtime.RegisterPlugin`` and calls
``Configure``, ``Synchronize`` and ``CreateContainer`` with the real Go ttrpc
client and server, so framing, stream ids, status replies and the protobuf
encoding are checked against the implementation containerd uses.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing import consumers
from mokka_core.testing.consumers import missing

pytestmark = pytest.mark.consumer

SOURCE = Path(__file__).parent / "nri_runtime_check" / "main.go"
TTRPC_PACKAGE = "golang-github-containerd-ttrpc-dev"
TTRPC_SOURCE = Path("/usr/share/gocode/src/github.com/containerd/ttrpc")


@pytest.fixture(scope="module")
def runtime_check() -> Path:
    """The Go runtime stand-in, built offline against Debian's ttrpc; cached by source hash."""
    try:
        importlib.import_module("google.protobuf")
    except ImportError:
        missing("protobuf not installed (pip install 'mokka-core[cluster]')")
    present = bool(shutil.which("go")) and TTRPC_SOURCE.is_dir()
    return consumers.go_program(SOURCE, "nri-runtime-check", [TTRPC_PACKAGE], present)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mk-", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_check(runtime_check: Path, short_dir: Path, root: Path, namespace: str, *env: str) -> dict[str, object]:
    from mokka_core.cluster.nri.inject import InjectConfig
    from mokka_core.cluster.nri.plugin import NriPlugin, PluginSettings

    sock = short_dir / "nri.sock"
    check = subprocess.Popen([str(runtime_check), str(sock), namespace, *env], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    plugin = NriPlugin(PluginSettings(inject=InjectConfig(root=root, namespaces=("ml",)), socket=sock,
                                      health_addr="", reconnect_min=0.05, reconnect_max=0.2))
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    try:
        out, err = check.communicate(timeout=60)
    finally:
        stop.set()
        thread.join(10)
        check.kill()
    assert check.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def test_go_ttrpc_runtime_registers_configures_and_gets_the_adjustment(runtime_check: Path, short_dir: Path,
                                                                       tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / LIB_DIR).mkdir(parents=True)
    result = run_check(runtime_check, short_dir, root, "ml", "PATH=/bin", "LD_LIBRARY_PATH=/app/lib")
    assert (result["plugin_name"], result["plugin_idx"], result["events"]) == ("mokka", "10", 8)
    assert result["adjust"] == {
        "mounts": [{"destination": "/opt/mokka", "type": "bind", "source": str(root),
                    "options": ["rbind", "ro", "nosuid", "nodev"]}],
        "env": [{"key": "LD_LIBRARY_PATH", "value": f"/opt/mokka/{LIB_DIR}:/app/lib"}],
        "linux": None,
    }
    assert "Unimplemented" in str(result["unknown_service_error"])


def test_go_ttrpc_runtime_gets_no_adjustment_for_other_namespaces(runtime_check: Path, short_dir: Path,
                                                                  tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    result = run_check(runtime_check, short_dir, root, "web", "PATH=/bin")
    assert result["adjust"] is None
