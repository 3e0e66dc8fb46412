"""Nodes named by DNS name in the nodes config, as drivers from 570.158 take them and the DRA driver's compute-domain
daemon writes them (one name per daemon pod, mapped to its pod IP in the container's /etc/hosts, SIGUSR1 when the
mapping changes). Each daemon runs in its own mount namespace whose /etc/hosts is the test's (root only)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.staging import stage_wave
from mokka_core.stage.surface import StageContext
from mokka_core.testing.waiting import wait_for
from mokka_sim_imex.config import load_nodes
from mokka_sim_imex.surface import ImexSurface
from mokka_sim_imex.testing import Daemons, configure, ctl_q, free_port

NAMES = ["compute-domain-daemon-0", "compute-domain-daemon-1.imex.svc.cluster.local"]
ADDRESSES = ["127.0.0.12", "127.0.0.13"]


def test_a_nodes_config_takes_addresses_and_dns_names(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes_config.cfg"
    nodes.write_text("10.0.0.1\n" + "".join(f"{name}\n" for name in NAMES) + "fd00::7\n")
    assert load_nodes(nodes) == ["10.0.0.1", *NAMES, "fd00::7"]


@pytest.mark.parametrize("entry", ["node_1", "-leading-hyphen", "a..b", "x" * 64, "10.0.0.300/24"])
def test_an_entry_that_is_neither_is_refused_naming_its_line(tmp_path: Path, entry: str) -> None:
    nodes = tmp_path / "nodes_config.cfg"
    nodes.write_text(f"10.0.0.1\n{entry}\n")
    with pytest.raises(ConfigError, match=r"line 2.*must be an IP address or a DNS name"):
        load_nodes(nodes)


@pytest.fixture
def named_domain(tmp_path: Path) -> dict[str, Path]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private /etc/hosts needs root and unshare(1)")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(ADDRESSES, NAMES, strict=True)))
    server_port, cmd_port = free_port(), free_port()
    roots = {}
    for name, address in zip(NAMES, ADDRESSES, strict=True):
        root = tmp_path / name
        node = NodeSpec(profile="gb200", node_name=name.split(".")[0]).resolve()
        stage_wave({"imex": ImexSurface().plan(node, StageContext(root=root))}, root)
        configure(root, address, NAMES, server_port, cmd_port)
        roots[name] = root
    return {"hosts": hosts, **roots}


def start(daemons: Daemons, named_domain: dict[str, Path], name: str) -> subprocess.Popen[str]:
    root = named_domain[name]
    node = NodeSpec(profile="gb200", node_name=name.split(".")[0]).resolve()
    (service,) = ImexSurface().services(node, StageContext(root=root))
    private_hosts = 'mount --make-rprivate / && mount --bind "$0" /etc/hosts && exec "$@"'
    return daemons.start(["unshare", "--mount", "sh", "-c", private_hosts, str(named_domain["hosts"]),
                          *service.command])


def test_peers_named_by_dns_name_form_the_domain_and_sigusr1_keeps_it(named_domain: dict[str, Path],
                                                                      daemons: Daemons) -> None:
    procs = [start(daemons, named_domain, name) for name in NAMES]
    configs = [named_domain[name] / "etc/nvidia-imex/config.cfg" for name in NAMES]
    wait_for(lambda: all(ctl_q(c).stdout.strip() == "READY" for c in configs), what="both named nodes READY")
    for proc in procs:  # the shell exec'd the daemon: the pid is the daemon's
        proc.send_signal(signal.SIGUSR1)
    time.sleep(2)
    assert all(proc.poll() is None for proc in procs)
    assert all(ctl_q(c).stdout.strip() == "READY" for c in configs)
    assert "nodes config re-read: 2 node(s)" in daemons.stop(procs[0])
