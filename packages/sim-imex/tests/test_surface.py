"""What the imex surface stages, and the fake daemon and ctl on one node."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.stage import procdevices
from mokka_core.stage.staging import stage_wave, teardown
from mokka_core.stage.surface import CharDevice, StageContext
from mokka_core.testing.waiting import wait_for
from mokka_sim_imex.config import CONFIG_FILE
from mokka_sim_imex.surface import CAPABILITY_FILE, CHANNEL_COUNT, PROC_DEVICES_FILE, ImexSurface
from mokka_sim_imex.testing import Daemons, configure, ctl_q, free_port


def stage(root: Path, failed: bool = False) -> ImexSurface:
    surface = ImexSurface()
    node = NodeSpec(profile="gb200", surfaces={"imex": {"state": "failed" if failed else "healthy"}}).resolve()
    stage_wave({"imex": surface.plan(node, StageContext(root=root))}, root)
    return surface


def test_channels_and_proc_devices_agree(tmp_path: Path) -> None:
    stage(tmp_path)
    majors = procdevices.char_majors((tmp_path / PROC_DEVICES_FILE).read_text(), "staged")
    channel_major = next(m for m, names in majors.items() if "nvidia-caps-imex-channels" in names)
    caps_major = next(m for m, names in majors.items() if "nvidia-caps" in names)
    channels = sorted((tmp_path / "dev/nvidia-caps-imex-channels").iterdir())
    assert len(channels) == CHANNEL_COUNT
    capability = (tmp_path / CAPABILITY_FILE).read_text()
    assert capability.startswith("DeviceFileMinor: 512\n")
    if os.geteuid() == 0:
        st = (tmp_path / "dev/nvidia-caps-imex-channels/channel7").stat()
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (channel_major, 7)
        cap = (tmp_path / "dev/nvidia-caps/nvidia-cap512").stat()
        assert (os.major(cap.st_rdev), os.minor(cap.st_rdev)) == (caps_major, 512)
    # everything else of the host's file is kept
    host = Path("/proc/devices").read_text()
    assert all(line in (tmp_path / PROC_DEVICES_FILE).read_text() for line in host.splitlines()
               if "nvidia-caps" not in line)
    assert teardown(tmp_path, "imex")
    assert list(tmp_path.iterdir()) == []


def test_plan_has_every_channel_device() -> None:
    node = NodeSpec(profile="gb200").resolve()
    devices = [e for e in ImexSurface().plan(node, StageContext(root=Path("/"))) if isinstance(e, CharDevice)]
    assert [d.minor for d in devices[:CHANNEL_COUNT]] == list(range(CHANNEL_COUNT))


def test_single_node_daemon_is_ready_and_ctl_says_so(tmp_path: Path, daemons: Daemons) -> None:
    surface = stage(tmp_path)
    config = configure(tmp_path, "127.0.0.1", ["127.0.0.1"], free_port(), free_port())
    node = NodeSpec(profile="gb200").resolve()
    (service,) = surface.services(node, StageContext(root=tmp_path))
    assert service.command[-1] == str(tmp_path / CONFIG_FILE)
    proc = daemons.start(service.command)
    wait_for(lambda: ctl_q(config).returncode == 0, what="imex-ctl -q answering")
    result = ctl_q(config)
    assert result.stdout == "READY\n"
    out = daemons.stop(proc)
    assert proc.returncode == 0 and "clean shutdown" in out
    down = ctl_q(config)
    assert down.returncode == 1 and down.stdout.startswith("NOT_READY")


def test_two_single_node_domains_on_one_machine_are_both_ready(tmp_path: Path, daemons: Daemons) -> None:
    """As staged (the real default ports), each node's daemon binds its own loopback address."""
    node = NodeSpec(profile="gb200").resolve()
    configs = []
    for name in ("a", "b"):
        root = tmp_path / name
        root.mkdir()
        surface = stage(root)
        (service,) = surface.services(node, StageContext(root=root))
        daemons.start(service.command)
        configs.append(root / CONFIG_FILE)
    addresses = {line for config in configs for line in config.read_text().splitlines() if "NODE_IP" in line}
    assert len(addresses) == 2 and "MOKKA_NODE_IP=127.0.0.1" not in addresses
    for config in configs:
        wait_for(lambda config=config: ctl_q(config).stdout == "READY\n", what=f"{config} READY")


def test_failed_daemon_is_never_ready(tmp_path: Path, daemons: Daemons) -> None:
    surface = stage(tmp_path, failed=True)
    config = configure(tmp_path, "127.0.0.1", ["127.0.0.1"], free_port(), free_port())
    node = NodeSpec(profile="gb200", surfaces={"imex": {"state": "failed"}}).resolve()
    (service,) = surface.services(node, StageContext(root=tmp_path))
    assert "--failed" in service.command
    daemons.start(service.command)
    wait_for(lambda: ctl_q(config).stdout.startswith("NOT_READY 0/1"), what="NOT_READY 0/1")
    assert ctl_q(config).returncode == 1


def test_ctl_without_q_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess
    result = subprocess.run([sys.executable, "-m", "mokka_sim_imex.ctl"], capture_output=True, text=True)
    assert result.returncode == 2


@pytest.mark.parametrize(("nodes", "message"), [
    ("10.0.0.1\nnot_an_ip\n", "line 2: must be an IP address or a DNS name"),
    ("# nobody\n", "lists no nodes"),
    ("10.0.0.1\n10.0.0.2\n", "lists no entry that is or resolves to this node's address 127.0.0.1"),
])
def test_bad_nodes_config_is_refused_naming_file_and_line(tmp_path: Path, nodes: str, message: str) -> None:
    import subprocess
    stage(tmp_path)
    configure(tmp_path, "127.0.0.1", ["127.0.0.1"], free_port(), free_port())
    (tmp_path / "etc/nvidia-imex/nodes_config.cfg").write_text(nodes)
    result = subprocess.run([sys.executable, "-m", "mokka_sim_imex.daemon", "--root", str(tmp_path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "nodes_config.cfg" in result.stderr and message in result.stderr
