"""What a Kubernetes node changes on its host, recorded before the cluster starts and put back after.

The kubelet writes sysctls (``vm.overcommit_memory``, ``kernel.panic*``, ``kernel.keys.*``), iptables chains
(KUBE-FIREWALL, KUBE-*-CANARY) and kubepods cgroups; the bridge CNI plugin sets ``ip_forward`` and adds a
bridge and veth links; containerd and the kubelet mount under their directories; the tests install the
container toolkit at /usr/bin. :func:`snapshot` records each; :func:`restore` undoes what differs and
:func:`differences` says what is still not as it was (a test asserts there is nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSCTL = Path("/proc/sys")
CGROUPS = Path("/sys/fs/cgroup")
#: Writable sysctls whose value the kernel itself moves on.
VOLATILE_SYSCTLS = ("kernel/ns_last_pid", "kernel/random/", "fs/")


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str]
    iptables: dict[str, str]
    mounts: frozenset[str]
    links: frozenset[str]
    cgroups: frozenset[str]
    paths: dict[str, bool]
    root_propagation: str  # of the mount at /: a node makes it shared (see node.py)


def _read_sysctls() -> dict[str, str]:
    values = {}
    for path in SYSCTL.rglob("*"):
        key = path.relative_to(SYSCTL).as_posix()
        if key.startswith(VOLATILE_SYSCTLS) or not path.is_file() or not os.access(path, os.W_OK):
            continue
        try:
            values[key] = path.read_text()
        except OSError:
            continue
    return values


def _iptables() -> dict[str, str]:
    tables = {}
    for program in ("iptables-save", "ip6tables-save"):
        if shutil.which(program, path="/usr/sbin:/sbin:/usr/bin"):
            done = subprocess.run([program], capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "PATH": "/usr/sbin:/sbin:/usr/bin:/bin"})
            tables[program] = done.stdout
    return tables


def _rules(saved: str) -> dict[str, list[str]]:
    """iptables-save output by table, without comments and counters; a table that holds only its built-in chains,
    empty and accepting, is the same as no table (what iptables-nft leaves after a flush)."""
    tables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in saved.splitlines():
        if line.startswith("*"):
            current = tables.setdefault(line[1:], [])
        elif line.startswith(":"):
            current.append(line.split(" [")[0])
        elif line and not line.startswith("#") and line != "COMMIT":
            current.append(line)
    return {table: lines for table, lines in tables.items()
            if any(not (line.startswith(":") and line.endswith(" ACCEPT")) for line in lines)}


def _flush(program: str, tables: list[str]) -> None:
    command = program.replace("-save", "")
    for table in tables:
        for flag in ("-F", "-X"):
            subprocess.run([command, "-t", table, flag], capture_output=True, timeout=60,
                           env={**os.environ, "PATH": "/usr/sbin:/sbin:/usr/bin:/bin"})


def _mounts() -> frozenset[str]:
    return frozenset(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _links() -> frozenset[str]:
    return frozenset(p.name for p in Path("/sys/class/net").iterdir())


def _cgroups() -> frozenset[str]:
    return frozenset(str(p) for hierarchy in CGROUPS.iterdir() if hierarchy.is_dir()
                     for p in hierarchy.rglob("*") if p.is_dir())


def root_propagation() -> str:
    """shared, private, slave or unbindable: the propagation of the mount at / (findmnt's PROPAGATION)."""
    return subprocess.run(["findmnt", "-no", "PROPAGATION", "/"], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def snapshot(paths: list[Path]) -> HostState:
    return HostState(sysctls=_read_sysctls(), iptables=_iptables(), mounts=_mounts(), links=_links(),
                     cgroups=_cgroups(), paths={str(p): os.path.lexists(p) for p in paths},
                     root_propagation=root_propagation())


def restore(before: HostState) -> None:
    """Undo every difference from ``before``: mounts (deepest first), links, cgroups, paths, iptables, sysctls."""
    for mount in sorted(_mounts() - before.mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=60)
    if root_propagation() != before.root_propagation and before.root_propagation:
        subprocess.run(["mount", f"--make-{before.root_propagation.split(',')[0]}", "/"], capture_output=True,
                       timeout=60)
    for link in _links() - before.links:
        subprocess.run(["ip", "link", "delete", link], capture_output=True, timeout=60)
    for cgroup in sorted(_cgroups() - before.cgroups, key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(cgroup)
    for path, existed in before.paths.items():
        if not existed and os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    for program, saved in before.iptables.items():
        now = _rules(_iptables().get(program, ""))
        if _rules(saved) != now:
            _flush(program, list(now))
            subprocess.run([program.replace("-save", "-restore")], input=saved, text=True, capture_output=True,
                           timeout=60, env={**os.environ, "PATH": "/usr/sbin:/sbin:/usr/bin:/bin"})
    now = _read_sysctls()
    for key, value in before.sysctls.items():
        if now.get(key, value) != value:
            with contextlib.suppress(OSError):
                (SYSCTL / key).write_text(value)


def differences(before: HostState) -> list[str]:
    """What is not as ``before`` recorded it, one line each."""
    after = snapshot([Path(p) for p in before.paths])
    found = [f"sysctl {key}: {value.strip()!r}, was {before.sysctls[key].strip()!r}"
             for key, value in sorted(after.sysctls.items()) if before.sysctls.get(key, value) != value]
    found += [f"{program}: rules differ" for program, saved in before.iptables.items()
              if _rules(saved) != _rules(after.iptables.get(program, ""))]
    found += [f"mount {m} added" for m in sorted(after.mounts - before.mounts)]
    found += [f"mount {m} gone" for m in sorted(before.mounts - after.mounts)]
    found += [f"link {name} added" for name in sorted(after.links - before.links)]
    if after.root_propagation != before.root_propagation:
        found.append(f"/ is {after.root_propagation}, was {before.root_propagation}")
    found += [f"cgroup {c} added" for c in sorted(after.cgroups - before.cgroups)]
    found += [f"{path} {'left behind' if now else 'removed'}" for path, now in after.paths.items()
              if now != before.paths[path]]
    return found
