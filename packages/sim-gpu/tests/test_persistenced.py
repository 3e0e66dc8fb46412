"""The ``mokka-persistenced`` service: declared wherever the driver is installed, and under ``mokka-sim-gpu serve``
what a GPU container's library connects to: nvidia-persistenced's socket, passing the state file's descriptor."""

from __future__ import annotations

import array
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.stage.native import native_library
from mokka_core.stage.paths import NVML_STATE_FILE, PERSISTENCED_SOCKET
from mokka_core.stage.surface import Runtime, StageContext
from mokka_sim_gpu.persistenced_service import PROGRAM
from mokka_sim_gpu.surface import GpuSurface


def test_declared_wherever_the_driver_is_installed(make_node, tmp_path: Path) -> None:
    if native_library(PROGRAM) is None or native_library("mokka-kmsg") is None:
        pytest.skip("the native services are not built (make -C native install)")
    ctx = StageContext(root=tmp_path)
    states = {"healthy": {}, "failed": {"state": "failed"}, "disabled": {"enabled": False}}
    names = {state: [s.name for s in GpuSurface().services(make_node("h100", gpu=settings), ctx)]
             for state, settings in states.items()}
    assert names == {"healthy": ["mokka-kmsg", PROGRAM], "failed": [PROGRAM], "disabled": []}
    (service,) = [s for s in GpuSurface().services(make_node("h100"), ctx) if s.name == PROGRAM]
    assert service.ready_path == PERSISTENCED_SOCKET == "run/nvidia-persistenced/socket"
    assert service.command[1:] == ["--root", str(tmp_path), "--state", NVML_STATE_FILE, "--settings",
                                   NVML_STATE_FILE.replace(".state", ".settings"), "--socket", PERSISTENCED_SOCKET]


def test_the_socket_is_the_surfaces(make_node, native_dir: Path) -> None:
    """A socket a killed service left is removed by teardown; nothing of it is staged while it is not running."""
    for settings in ({}, {"state": "failed"}):
        plan = GpuSurface().plan(make_node("h100", gpu=settings), StageContext(root=Path("/"), native_dir=native_dir))
        assert Runtime(PERSISTENCED_SOCKET) in plan


def test_serve_passes_the_state_file_to_a_connection(tmp_path: Path) -> None:
    if native_library(PROGRAM) is None:
        pytest.skip("mokka-persistenced is not built (make -C native install)")
    root = tmp_path / "root"
    gpu = Path(sys.executable).with_name("mokka-sim-gpu")
    serving = subprocess.Popen([str(gpu), "serve", "--root", str(root), "--profile", "h100", "--gpus", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (root / PERSISTENCED_SOCKET).exists():
            assert serving.poll() is None and time.monotonic() < deadline, "no socket from mokka-sim-gpu serve"
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
            client.settimeout(10)
            client.connect(str(root / PERSISTENCED_SOCKET))
            text, ancillary, _, _ = client.recvmsg(64, socket.CMSG_SPACE(4 * 4))
            fds = array.array("i")
            for _, _, data in ancillary:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            try:
                assert text == b"mokka-nvml-fds 1 state"
                assert os.fstat(fds[0]).st_ino == (root / NVML_STATE_FILE).stat().st_ino
                assert os.pread(fds[0], 18, 0) == b"mokka-nvml-state 1"
            finally:
                for fd in fds:
                    os.close(fd)
    finally:
        serving.send_signal(signal.SIGTERM)
        out, _ = serving.communicate(timeout=60)
    assert serving.returncode == 0, out
    assert not (root / "run").exists(), out  # socket and its directories gone with the node
