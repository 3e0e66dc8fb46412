"""Every input read whole is read with a bound: a device, a FIFO or a symlink to one is a clear error at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: each reader runs in a child with its memory capped, so an unbounded read fails the test instead of the machine
READ_IN_CHILD = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from mokka_core.errors import ConfigError
from mokka_core.schema import loader
from mokka_core.stage import procdevices
path = Path(sys.argv[2])
readers = {"profile": loader.load_profile, "overlay": loader.load_overlay, "override": loader.read_override,
           "surfaces": loader.load_surfaces, "proc-devices": lambda _: procdevices.host_proc_devices()}
try:
    readers[sys.argv[1]](path)
except ConfigError as exc:
    print(exc)
"""

READERS = ["profile", "overlay", "override", "surfaces", "proc-devices"]


def special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-fifo.yaml"
    link.symlink_to(fifo)
    return {"/dev/zero": Path("/dev/zero"), "a FIFO": fifo, "a symlink to a FIFO": link}


def read_in_child(reader: str, path: Path) -> str:
    env = {**os.environ, "MOKKA_HOST_PROC_DEVICES": str(path)}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", READ_IN_CHILD, reader, str(path)], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - t0 < 10  # the interpreter's start included; the read itself is immediate
    return done.stdout


@pytest.mark.parametrize("reader", READERS)
def test_a_device_or_fifo_input_is_refused_at_once_naming_it(tmp_path: Path, reader: str) -> None:
    for what, path in special_files(tmp_path).items():
        message = read_in_child(reader, path)
        assert f"{path}: not a regular file" in message, (what, message)


@pytest.mark.parametrize("reader", READERS)
def test_an_input_past_the_bound_is_refused_naming_it(tmp_path: Path, reader: str) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (8 << 20))
    assert f"{big}: file is larger than" in read_in_child(reader, big)
