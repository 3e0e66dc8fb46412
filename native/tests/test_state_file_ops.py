"""File operations on the state file that must never crash or hang a consumer (issue 18, items 1 and 2)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import nvml_env
from mkstate import make_state, write_state

READER = textwrap.dedent("""
    import ctypes, sys, threading, time
    L = ctypes.CDLL("libnvidia-ml.so.1")
    assert L.nvmlInit_v2() == 0
    d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
    print("ready", flush=True)
    stop = time.monotonic() + float(sys.argv[1])
    seen = set()
    def read():
        t = ctypes.c_uint()
        while time.monotonic() < stop:
            assert L.nvmlDeviceGetTemperature(d, 0, ctypes.byref(t)) == 0
            seen.add(t.value)
    ts = [threading.Thread(target=read) for _ in range(3)]
    for t in ts: t.start()
    for t in ts: t.join()
    print(sorted(seen))
""")


def reader(lib_dir: Path, state: Path, seconds: float) -> subprocess.Popen:
    """A consumer with three threads reading a temperature for `seconds`, started once it has initialised."""
    p = subprocess.Popen([sys.executable, "-c", READER, str(seconds)], env=nvml_env(lib_dir, state),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def test_in_place_rewrite_never_kills_a_reader(lib_dir, state_file):
    """`cp other.state mokka-nvml.state` truncates and rewrites the file under a reader's feet."""
    st = state_file("h100")
    texts = [make_state("h100", overrides={"device.0.temperature.gpu": t}).encode() for t in (41, 42)]
    p = reader(lib_dir, st, 3.0)
    end = time.monotonic() + 2.5
    k = 0
    while time.monotonic() < end:
        fd = os.open(st, os.O_WRONLY | os.O_TRUNC)
        data = texts[k % 2]
        for i in range(0, len(data), 512):  # small writes: readers see every length, down to empty
            os.write(fd, data[i:i + 512])
        os.close(fd)
        k += 1
    try:
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, f"reader died: rc={p.returncode}\n{err}"
    assert {41, 42} & set(eval(out)), out  # it also followed the rewrites


def test_fifo_at_the_state_path_never_blocks_and_recovers(lib_dir, state_file, tmp_path):
    st = state_file("t4")
    good = tmp_path / "good.state"
    os.rename(st, good)
    os.mkfifo(st)
    code = textwrap.dedent(f"""
        import ctypes, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from mkstate import write_state
        L = ctypes.CDLL("libnvidia-ml.so.1")
        assert L.nvmlInit_v2() == 9                  # a FIFO is not a state file: refused, not waited on
        write_state({str(st)!r}, open({str(good)!r}).read())   # a good file renamed over the FIFO
        t0 = time.monotonic()
        while L.nvmlInit_v2() != 0:
            assert time.monotonic() - t0 < 2
            time.sleep(0.005)
    """)
    p = subprocess.run([sys.executable, "-c", code], env=nvml_env(lib_dir, st), capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    assert "not a regular file" in p.stderr


def test_directory_or_device_at_the_state_path_is_refused(lib_dir, tmp_path):
    d = tmp_path / "dir.state"
    d.mkdir()
    for path in (d, Path("/dev/zero")):
        p = subprocess.run([sys.executable, "-c", "import ctypes; L = ctypes.CDLL('libnvidia-ml.so.1'); "
                            "assert L.nvmlInit_v2() == 9"], env=nvml_env(lib_dir, path), capture_output=True,
                           text=True, timeout=20)
        assert p.returncode == 0 and "not a regular file" in p.stderr, p.stderr


def test_good_file_after_a_fifo_in_a_running_reader(lib_dir, state_file):
    """A reader already running keeps its last good state while a FIFO sits there, then follows the good file."""
    st = state_file("h100")
    p = reader(lib_dir, st, 2.0)
    time.sleep(0.5)
    tmp = st.with_name("fifo.tmp")
    os.mkfifo(tmp)
    os.rename(tmp, st)
    time.sleep(0.5)
    write_state(st, make_state("h100", overrides={"device.0.temperature.gpu": 55}))
    try:
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert 55 in eval(out), out
