"""Drive the node daemon from tests: :class:`DaemonRunner` plus a few small test surfaces.

Like kopf's ``KopfRunner``, the daemon runs in a thread of the test process (so
injected surfaces, mocks and tracebacks survive) on a temporary root::

    with DaemonRunner(NodeSettings(root=tmp_path, spec=NodeSpec(profile="h100")),
                      surfaces={"probe": ProbeSurface()}) as runner:
        ...  # the node is published; change files, assert
    # stopped and torn down here; runner.exception holds what run() raised

The surfaces below are for tests only: ``ProbeSurface`` renders the per-GPU values
a consumer would read into one JSON file, ``BrokenSurface`` raises while planning,
``SlowSurface`` takes its time, ``ServiceSurface`` declares a long-lived program.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from ..ctl.cli import execute_captured
from ..model.codec import encode
from ..model.node import Node
from ..node.daemon import run
from ..node.settings import NodeSettings
from ..stage.surface import Entry, File, Service, StageContext, Surface


class DaemonRunner:
    def __init__(self, settings: NodeSettings, surfaces: Mapping[str, Surface] | None = None,
                 timeout: float = 20.0, expect_ready: bool = True, ctl_socket: bool = True) -> None:
        # as `mokka node up`: nvml-mock-ctl hands its commands to the daemon (``ctl_socket=False``: it cannot)
        self.settings = replace(settings, ctl=execute_captured) if ctl_socket and settings.ctl is None else settings
        self.surfaces = surfaces
        self.timeout = timeout
        self.expect_ready = expect_ready
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.exception: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mokka-node-daemon", daemon=True)

    def _run(self) -> None:
        try:
            run(self.settings, self.stop_flag, self.ready_flag, self.surfaces)
        except BaseException as exc:
            self.exception = exc

    def __enter__(self) -> DaemonRunner:
        self._thread.start()
        if self.expect_ready:
            deadline = time.monotonic() + self.timeout
            while not self.ready_flag.wait(0.01):
                if not self._thread.is_alive():
                    raise RuntimeError(f"node daemon exited before it was ready: {self.exception!r}") \
                        from self.exception
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node daemon not ready within {self.timeout} s")
        return self

    def stop(self) -> float:
        """Stop the daemon and wait for its teardown; returns the seconds that took."""
        started = time.monotonic()
        self.stop_flag.set()
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"node daemon did not stop within {self.timeout} s")
        return time.monotonic() - started

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread.is_alive():
            self.stop()


# --- test surfaces -------------------------------------------------------------------------------------

PROBE_FILE = "var/lib/mokka-probe/state.json"


@contextmanager
def recording_node(root: Path) -> Iterator[list[Sequence[str]]]:
    """A two-GPU H100 node with its daemon (a probe surface, no services), whose ctl socket records every
    command handed to it: the list it yields."""
    from ..model.spec import NodeSpec

    relayed: list[Sequence[str]] = []

    def runner(words: Sequence[str], where: Path) -> tuple[int, str, str]:
        relayed.append(list(words))
        return execute_captured(words, where)

    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False, ctl=runner)
    with DaemonRunner(settings, surfaces={"probe": ProbeSurface()}):
        yield relayed


def probe_view(node: Node) -> dict[str, Any]:
    """What a consumer reads of each GPU (through the load model, as NVML serves it)."""
    from ..model.physics import readings

    gpus = {}
    for gpu in node.gpus:
        config = gpu.config
        memory = config.memory
        now = readings(config)
        used = now.memory_used_bytes or 0
        gpus[str(gpu.index)] = {
            "uuid": gpu.uuid,
            "lost": node.gpu_lost(gpu),
            "failure": gpu.failure_mode,
            "temperature_c": now.temperature_c,
            "power_mw": now.power_mw,
            "memory": {"total": memory.total_bytes, "reserved": memory.reserved_bytes, "used": used,
                       "free": max(0, memory.total_bytes - memory.reserved_bytes - used)} if memory else None,
            "xid_events": [encode(event) for event in config.xid_events or ()],
        }
    return {"node": node.node_name, "gpus": gpus}


class ProbeSurface(Surface):
    """Renders what a consumer would read (temperature, memory, faults, Xids) into one JSON file."""

    name = "probe"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [File(PROBE_FILE, json.dumps(probe_view(node), sort_keys=True))]


class StaticSurface(Surface):
    """A plan that never changes with the node (to check it is not restaged needlessly)."""

    name = "static"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [File("etc/mokka-static/driver", f"{node.driver_version}\n")]


class BrokenSurface(Surface):
    name = "broken"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        raise RuntimeError("deliberately broken test surface")


class SlowSurface(Surface):
    """Takes ``delay`` seconds to plan; ``started`` is set when planning begins."""

    name = "slow"

    def __init__(self, delay: float = 2.0) -> None:
        self.delay = delay
        self.started = threading.Event()

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        self.started.set()
        time.sleep(self.delay)
        return [File("etc/mokka-slow/done", "1\n")]


class ServiceSurface(Surface):
    """Declares one long-lived program that writes its pid into ``<pid_dir>/<program>.pid`` and sleeps."""

    name = "service"

    def __init__(self, pid_dir: Path, program: str = "mokka-test-sleeper") -> None:
        self.pid_dir = pid_dir
        self.program = program

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [File("etc/mokka-service/enabled", "1\n")]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        code = ("import os, sys, time; p = sys.argv[1]; os.makedirs(os.path.dirname(p), exist_ok=True); "
                "open(p, 'w').write(str(os.getpid())); print(os.path.basename(p)[:-4] + ': sleeping', flush=True); "
                "time.sleep(3600)")
        pid_file = str(self.pid_dir.absolute() / f"{self.program}.pid")
        return [Service(name=self.program, command=[sys.executable, "-c", code, pid_file])]


class NvmlSurface(Surface):
    """The NVML part of the gpu surface alone: the mock library chain and its state file.

    For mokka-core's own tests of consumers (pynvml, nvidia-smi) where the sim-gpu
    package is not installed; needs the built library (``mokka_core.stage.native``).
    """

    name = "gpu"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        from ..stage.nvml_view import render_nvml_state  # type: ignore[import-not-found,unused-ignore]
        from ..stage.paths import LIB_DIR, NVML_STATE_FILE
        from ..stage.surface import Copy, Symlink

        if ctx.native_dir is None:
            raise RuntimeError("the mock libnvidia-ml is not built (make -C native install)")
        library = (ctx.native_dir / "libnvidia-ml.so.1").resolve()
        return [
            Copy(f"{LIB_DIR}/{library.name}", library),
            Symlink(f"{LIB_DIR}/libnvidia-ml.so.1", library.name),
            Symlink(f"{LIB_DIR}/libnvidia-ml.so", "libnvidia-ml.so.1"),
            File(NVML_STATE_FILE, render_nvml_state(node, ctx.nvml)),
        ]


def nvml_surface() -> Surface:
    """The installed gpu surface (sim-gpu, found through its entry point), else :class:`NvmlSurface`."""
    from ..stage.surface import discover

    gpu = discover().get("gpu")
    return gpu() if gpu is not None else NvmlSurface()


def serve(argv: list[str] | None = None) -> None:
    """Run the daemon with test surfaces in its own process, signals handled like ``mokka node up``.

    ``python -m mokka_core.testing.runner --root R [--slow SECONDS] [--service PID_DIR] [--broken]``
    """
    import argparse

    from ..model.spec import NodeSpec
    from ..node.foreground import foreground
    from ..node.logstream import daemon_logging

    parser = argparse.ArgumentParser(prog="python -m mokka_core.testing.runner")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--profile", default="h100")
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--slow", type=float, default=None, help="add a surface that plans this long")
    parser.add_argument("--service", type=Path, default=None, help="add a supervised sleeper (pid file dir)")
    parser.add_argument("--broken", action="store_true", help="add a surface that raises while planning")
    args = parser.parse_args(argv)
    surfaces: dict[str, Surface] = {"probe": ProbeSurface(), "static": StaticSurface()}
    if args.slow is not None:
        surfaces["slow"] = SlowSurface(args.slow)
    if args.service is not None:
        surfaces["service"] = ServiceSurface(args.service)
    if args.broken:
        surfaces["broken"] = BrokenSurface()
    settings = NodeSettings(root=args.root, spec=NodeSpec(profile=args.profile, gpus=args.gpus),
                            supervise=args.service is not None, ctl=execute_captured, log_echo=sys.stdout)
    daemon_logging()
    sys.exit(foreground("mokka-node", lambda stop, ready: run(settings, stop, ready, surfaces), errors=(Exception,)))


if __name__ == "__main__":
    serve()
