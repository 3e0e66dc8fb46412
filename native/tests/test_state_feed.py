"""The state feed: a library with no state file beside it (a GPU container's) gets the node's state from the service
at nvidia-persistenced's socket, follows every change, keeps its last state when the service goes, refuses setters,
and survives whatever a peer on that socket sends."""
from __future__ import annotations

import array
import fcntl
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import consumers
from gpu_container import LIB_DIR, env, require_namespaces, run, setup_script, start
from mkstate import make_state, write_state

FDS = "mokka-nvml-fds 1"
BIN = Path(sys.executable).parent
STATE = f"usr/lib/{LIB_DIR.rsplit('/', 1)[1]}/mokka-nvml.state"
SOCKET = "run/nvidia-persistenced/socket"

#: polls GPU 0 from a container; prints one line per change: count, temperature, power limit, open descriptors;
#: forks once NVML is up, and the child polls too (a forked child dials a connection of its own)
WATCHER = textwrap.dedent("""
    import ctypes, os, sys, time
    def say(*words):  # one write: the parent's and the child's lines never mix
        os.write(1, (" ".join(map(str, words)) + "\\n").encode())
    L = ctypes.CDLL("libnvidia-ml.so.1")
    before = len(os.listdir("/proc/self/fd"))
    assert L.nvmlInit_v2() == 0
    who = "parent"
    if sys.argv[1] == "fork" and os.fork() == 0:
        who = "child"
    h, n, t, p = ctypes.c_void_p(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    seen, stop = None, sys.argv[2]
    while not os.path.exists(stop):
        assert L.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
        assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
        r = L.nvmlDeviceGetTemperature(h, 0, ctypes.byref(t))
        L.nvmlDeviceGetPowerManagementLimit(h, ctypes.byref(p))
        now = (n.value, t.value if r == 0 else f"error{r}", p.value)
        if now != seen:
            say(who, *now, time.time())
            seen = now
        time.sleep(0.001)
    assert L.nvmlDeviceGetHandleByIndex_v2(n.value - 1, ctypes.byref(h)) == 0
    say(who, "setter", L.nvmlDeviceSetPersistenceMode(h, 1))
    say(who, "descriptors", len(os.listdir("/proc/self/fd")) - before)
""")


class Lines:
    """The lines a process prints, read by a thread; each ``next`` takes the next one of a speaker."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process, self.lines, self.taken = process, [], {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def next(self, who: str, timeout: float = 20) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mine = [line.split() for line in list(self.lines) if line.startswith(who + " ")]
            if len(mine) > self.taken.get(who, 0):
                self.taken[who] = self.taken.get(who, 0) + 1
                return mine[self.taken[who] - 1]
            time.sleep(0.01)
        pytest.fail(f"no line of {who} within {timeout} s (exit {self.process.poll()}): {''.join(self.lines)}")

    def text(self) -> str:
        return "".join(self.lines)


def stop(process: subprocess.Popen[str], lines: Lines, stop_file: Path) -> str:
    stop_file.touch()
    process.wait(timeout=30)
    time.sleep(0.1)
    if process.stdout is not None:
        process.stdout.close()
    return lines.text()


@pytest.fixture
def node(tmp_path: Path):
    """An 8-GPU H100 node under `mokka node up` (gpu and pci surfaces): its root."""
    require_namespaces()
    root = tmp_path / "root"
    root.mkdir()
    up = subprocess.Popen([str(BIN / "mokka"), "node", "up", "--profile", "h100", "--surfaces", "gpu,pci",
                           "--root", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (root / SOCKET).exists():
            assert up.poll() is None and time.monotonic() < deadline, "mokka node up: no service socket"
            time.sleep(0.05)
        yield root
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    assert not (root / SOCKET).exists()


def uuids(state: Path) -> list[str]:
    pairs = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    return [pairs[f"device.{i}.uuid"] for i in range(int(pairs["system.device_count"]))]


def test_nvidia_smi_in_a_gpu_container_reads_the_node_and_its_faults(tmp_path, lib_dir, node):
    smi = consumers.require("nvidia-smi", version="550")
    environment = env(lib_dir)
    script = setup_script(tmp_path / "w", lib_dir, smi=smi, socket=node / SOCKET, minors=list(range(8)))
    done = run(script + f"test ! -e {LIB_DIR}/mokka-nvml.state\nnvidia-smi -L\n"
                        "nvidia-smi -i 0 -pl 500 || echo setter exit $?\n", environment)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    assert [line.split("UUID: ")[1].rstrip(")") for line in listed] == uuids(node / STATE)
    assert "Insufficient Permissions" in done.stdout + done.stderr and "setter exit 4" in done.stdout
    assert "mokka-nvml:" not in done.stderr

    (tmp_path / "watcher.py").write_text(WATCHER)
    stop_file = tmp_path / "stop"
    watcher = start(script + f"exec {sys.executable} {tmp_path / 'watcher.py'} fork {stop_file}\n", environment)
    lines = Lines(watcher)
    try:
        for who in ("parent", "child"):
            assert lines.next(who)[1:4] == ["8", "34", "700000"]
        ctl = subprocess.run([str(BIN / "nvml-mock-ctl"), "--root", str(node), "fail", "0", "fallen-off-bus"],
                             capture_output=True, text=True, timeout=60)
        changed = time.time()
        assert ctl.returncode == 0, ctl.stdout + ctl.stderr
        for who in ("parent", "child"):
            line = lines.next(who, timeout=10)
            assert line[2] == "error15", line  # GPU_IS_LOST
            assert float(line[-1]) - changed < 1.0, f"{who} saw the fault {float(line[-1]) - changed:.3f} s late"
    finally:
        out = stop(watcher, lines, stop_file)
    # NO_PERMISSION: a container cannot write the node's state
    assert "parent setter 4" in out and "child setter 4" in out, out


def fake_service(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    listener.listen(4)
    listener.settimeout(30)
    return listener


def push(conn: socket.socket, text: bytes, fds: list[int]) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    conn.sendmsg([text], ancillary)
    conn.settimeout(10)
    assert conn.recv(16), "the library did not answer the message"  # it answers every message, taken or not


def test_malformed_messages_are_ignored_and_the_last_state_kept(tmp_path, lib_dir):
    require_namespaces()
    states = {}
    for name, temperature in (("a", 34), ("b", 77)):
        states[name] = tmp_path / f"{name}.state"
        write_state(states[name], make_state("h100", overrides={"device.0.temperature.gpu": temperature}))
    (tmp_path / "bad.state").write_text("not a state file\n")
    (tmp_path / "settings").write_text("mokka-nvml-settings 1\ndevice.0.power.limit_mw=400000\nend\n")
    os.mkfifo(tmp_path / "fifo")
    opened = {name: os.open(path, os.O_RDONLY) for name, path in
              (*states.items(), ("bad", tmp_path / "bad.state"), ("settings", tmp_path / "settings"),
               ("dir", tmp_path), ("null", "/dev/null"), ("fifo", tmp_path / "fifo"))
              if name != "fifo"}
    opened["fifo"] = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    listener = fake_service(tmp_path / "feed.sock")
    (tmp_path / "watcher.py").write_text(WATCHER)
    stop_file = tmp_path / "stop"
    script = setup_script(tmp_path / "w", lib_dir, socket=tmp_path / "feed.sock")
    watcher = start(script + f"exec {sys.executable} {tmp_path / 'watcher.py'} one {stop_file}\n", env(lib_dir))
    lines = Lines(watcher)
    conn = None
    try:
        conn, _ = listener.accept()
        push(conn, f"{FDS} state".encode(), [opened["a"]])
        assert lines.next("parent")[1:4] == ["8", "34", "700000"]
        malformed = [
            (f"{FDS} state", [opened["dir"]]),                  # a directory: never held
            (f"{FDS} state", [opened["null"]]),                 # a device
            (f"{FDS} state", [opened["fifo"]]),                 # a FIFO
            (f"{FDS} state", [opened["b"], opened["b"]]),       # more descriptors than the text says
            (f"{FDS} state settings", [opened["b"]]),           # fewer
            (f"{FDS} state", []),                               # none
            (f"{FDS} state", [opened["b"]] * 12),               # more than fit: truncated
            ("mokka-nvml-fds 2 state", [opened["b"]]),          # another text
            (f"{FDS} state" + "x" * 200, [opened["b"]]),        # longer than any message: truncated
            ("", [opened["b"]]),                                # no text
            (f"{FDS} state", [opened["bad"]]),                  # a state file the parser rejects
        ]
        for text, fds in malformed:
            push(conn, text.encode(), fds)
        time.sleep(0.2)
        push(conn, f"{FDS} state settings".encode(), [opened["b"], opened["settings"]])
        assert lines.next("parent")[1:4] == ["8", "77", "400000"]
        conn.close()  # the service goes: the last state stays
        listener.close()
        time.sleep(1.5)  # past a redial
    finally:
        out = stop(watcher, lines, stop_file)
        listener.close()
        if conn is not None:
            conn.close()
        for fd in opened.values():
            os.close(fd)
    assert watcher.returncode == 0, out
    said = [line.split() for line in out.splitlines() if line.startswith("parent")]
    assert [line[1:4] for line in said[:-2]] == [["8", "34", "700000"], ["8", "77", "400000"]], out
    assert said[-2][1:] == ["setter", "4"], out
    assert int(said[-1][2]) <= 2, out  # the state file and setter record held; nothing a message carried
    assert "message ignored" in out and "rejected" in out, out
    assert "AddressSanitizer" not in out and "runtime error" not in out, out


def test_a_service_that_comes_back_is_dialled_again(tmp_path, lib_dir):
    """The socket is there but nothing listens: NVML init answers DRIVER_NOT_LOADED (nvidia-smi's "couldn't
    communicate with the NVIDIA driver") and says why; once a service listens there, the next init succeeds."""
    require_namespaces()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(str(run_dir / "socket"))  # bound, never listening: connections are refused
    dead.close()
    state = tmp_path / "a.state"
    write_state(state, make_state("h100", 2))
    (tmp_path / "init.py").write_text(textwrap.dedent("""
        import ctypes, os, sys, time
        L = ctypes.CDLL("libnvidia-ml.so.1")
        while (r := L.nvmlInit_v2()) != 0:
            os.write(1, f"init {r}\\n".encode())
            time.sleep(0.2)
        n = ctypes.c_uint()
        L.nvmlDeviceGetCount_v2(ctypes.byref(n))
        os.write(1, f"count {n.value}\\n".encode())
    """))
    script = setup_script(tmp_path / "w", lib_dir) + (
        f"mount -t tmpfs none /run\nmkdir /run/nvidia-persistenced\n"
        f"mount --bind {run_dir} /run/nvidia-persistenced\nexec {sys.executable} {tmp_path / 'init.py'}\n")
    process = start(script, env(lib_dir))
    lines = Lines(process)
    try:
        assert lines.next("init")[1] == "9"
        (run_dir / "socket").unlink()
        with fake_service(run_dir / "socket") as listener:
            conn, _ = listener.accept()
            with conn, open(state, "rb") as f:
                conn.sendmsg([f"{FDS} state".encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                            array.array("i", [f.fileno()]))])
                assert lines.next("count", timeout=10)[1] == "2"
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert "/run/nvidia-persistenced/socket: Connection refused" in lines.text(), lines.text()


def test_the_service_passes_only_regular_files_and_follows_replacements(tmp_path):
    """The program alone: the state file replaced by rename, the record appearing, a directory at the path."""
    program = Path(__file__).resolve().parents[1] / "build" / "mokka-persistenced"
    if not program.exists():
        subprocess.run(["make", "-s", "-C", str(program.parents[1]), "persistenced"], check=True)
    root = tmp_path / "root"
    state = root / STATE
    state.parent.mkdir(parents=True)
    write_state(state, make_state("h100", 2))
    service = subprocess.Popen([str(program), "--root", str(root), "--state", STATE, "--settings",
                                STATE.replace(".state", ".settings"), "--socket", SOCKET],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    closing: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 10
        while not (root / SOCKET).exists():
            assert service.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert (root / SOCKET).stat().st_mode & 0o777 == 0o666
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        closing.append(client)
        client.connect(str(root / SOCKET))
        client.settimeout(10)

        def receive() -> tuple[bytes, list[os.stat_result]]:
            text, ancillary, _, _ = client.recvmsg(64, socket.CMSG_SPACE(8 * 4))
            fds = array.array("i")
            for _, _, data in ancillary:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            stats = [os.fstat(fd) for fd in fds]
            assert all(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY for fd in fds)
            for fd in fds:
                os.close(fd)
            client.send(b"r")
            return text, stats

        text, (held,) = receive()
        assert text == f"{FDS} state".encode() and held.st_ino == state.stat().st_ino
        write_state(state, make_state("h100", 4))
        text, (held,) = receive()
        assert text == f"{FDS} state".encode() and held.st_ino == state.stat().st_ino
        record = state.with_suffix(".settings")
        write_state(record, "mokka-nvml-settings 1\nend\n")
        text, (held, kept) = receive()
        assert text == f"{FDS} state settings".encode() and kept.st_ino == record.stat().st_ino
        state.unlink()
        state.mkdir()  # a directory at the path: nothing is sent
        client.settimeout(1.5)
        with pytest.raises(TimeoutError):
            client.recvmsg(64, socket.CMSG_SPACE(8 * 4))
        state.rmdir()
        write_state(state, make_state("h100", 2))
        client.settimeout(10)
        text, (held, kept) = receive()
        assert held.st_ino == state.stat().st_ino
    finally:
        for each in closing:
            each.close()
        service.send_signal(signal.SIGTERM)
        out, _ = service.communicate(timeout=10)
    assert service.returncode == 0, out
    assert not (root / SOCKET).exists()
