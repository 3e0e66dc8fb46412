"""Console entry points of the cluster components: ``mokka-allocwatch`` and ``mokka-nri``.

Both run in the foreground, log to stdout, and stop cleanly on SIGTERM/SIGINT
(:func:`mokka_core.node.foreground.foreground`).
Every flag has an environment fallback so a chart can set them either way.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from ..node.foreground import foreground
from ..version import __version__


def _logging(verbose: bool) -> None:
    logging.basicConfig(stream=sys.stdout, level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def allocwatch_parser() -> argparse.ArgumentParser:
    from .podresources import DEFAULT_SOCKET, GPU_RESOURCE

    p = argparse.ArgumentParser(
        prog="mokka-allocwatch",
        description="Follow the kubelet's GPU allocations: allocated GPUs show memory in use and one "
                    "process per container in NVML (nvidia-smi, pynvml), released ones go idle again.")
    p.add_argument("--version", action="version", version=f"mokka-allocwatch {__version__}")
    p.add_argument("--root", type=Path, default=None,
                   help="node root (default: $MOKKA_ROOT, the cluster root, or /)")
    p.add_argument("--socket", type=Path, default=Path(_env("MOKKA_PODRESOURCES_SOCKET", str(DEFAULT_SOCKET))),
                   help="kubelet pod-resources socket ($MOKKA_PODRESOURCES_SOCKET; default %(default)s)")
    p.add_argument("--interval", type=float, default=float(_env("MOKKA_ALLOCWATCH_INTERVAL", "2")),
                   help="seconds between polls ($MOKKA_ALLOCWATCH_INTERVAL; default %(default)s)")
    p.add_argument("--used-fraction", type=float, default=float(_env("MOKKA_ALLOCWATCH_USED_FRACTION", "0.5")),
                   help="share of a GPU's memory each claiming container uses, in (0, 1] "
                        "($MOKKA_ALLOCWATCH_USED_FRACTION; default %(default)s)")
    p.add_argument("--resource", default=_env("MOKKA_ALLOCWATCH_RESOURCE", GPU_RESOURCE),
                   help="extended resource name to follow (default %(default)s)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for one List (default %(default)s)")
    p.add_argument("--render", action="store_true",
                   help="re-render the node's surfaces after each change (default: leave it to `mokka node`, "
                        "which watches the override file)")
    p.add_argument("--once", action="store_true", help="poll once, publish, and exit (status 1 if the kubelet "
                   "did not answer)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every poll and change (debug level)")
    return p


def allocwatch_main(argv: Sequence[str] | None = None) -> int:
    args = allocwatch_parser().parse_args(argv)
    from . import require_extra

    require_extra("grpc")
    from ..stage.paths import find_root
    from .allocwatch import AllocationWatcher, WatchSettings

    _logging(args.verbose)
    try:
        settings = WatchSettings(root=find_root(args.root), socket=args.socket, interval=args.interval,
                                 used_fraction=args.used_fraction, resource=args.resource, timeout=args.timeout,
                                 render=args.render)
    except ValueError as exc:
        print(f"mokka-allocwatch: {exc}", file=sys.stderr)
        return 2
    watcher = AllocationWatcher(settings)
    if args.once:
        watcher.poll()
        watcher.client.close()
        return 0 if watcher.kubelet_up else 1
    return foreground("mokka-allocwatch", lambda stop, ready: watcher.run(stop))

def nri_parser() -> argparse.ArgumentParser:
    from .nri.inject import DEVICE_MODES
    from .nri.plugin import DEFAULT_SOCKET

    p = argparse.ArgumentParser(
        prog="mokka-nri",
        description="NRI plugin: give containers of opted-in pods the mock NVIDIA driver (library, NVML state, "
                    "device nodes) at creation. Fails open: a pod is never blocked by this plugin.")
    p.add_argument("--version", action="version", version=f"mokka-nri {__version__}")
    p.add_argument("--root", type=Path, default=None,
                   help="staged node root on the host (default: $MOKKA_ROOT or the cluster root)")
    p.add_argument("--socket", type=Path, default=Path(_env("NRI_SOCKET_PATH", str(DEFAULT_SOCKET))),
                   help="the runtime's NRI socket ($NRI_SOCKET_PATH; default %(default)s)")
    p.add_argument("--plugin-name", default=_env("NRI_PLUGIN_NAME", "mokka"),
                   help="the name this plugin registers with the runtime ($NRI_PLUGIN_NAME; default %(default)s)")
    p.add_argument("--plugin-index", default=_env("NRI_PLUGIN_INDEX", "10"),
                   help="the plugin's place in the runtime's order of NRI plugins ($NRI_PLUGIN_INDEX; "
                        "default %(default)s)")
    p.add_argument("--health-addr", default=_env("MOKKA_NRI_HEALTH_ADDR", ":8080"),
                   help="host:port of /healthz and /readyz; empty disables (default %(default)s)")
    p.add_argument("--mount-path", default=_env("MOKKA_NRI_MOUNT_PATH", "/opt/mokka"),
                   help="where the root appears in containers (default %(default)s)")
    p.add_argument("--namespaces", default=_env("MOKKA_NRI_NAMESPACES", "*"),
                   help="comma-separated opted-in namespaces, * for all (default %(default)s)")
    p.add_argument("--excluded-namespaces", default=_env("MOKKA_NRI_EXCLUDED_NAMESPACES", "kube-system"),
                   help="comma-separated namespaces never touched (default %(default)s)")
    p.add_argument("--sysfs-namespaces", default=_env("MOKKA_NRI_SYSFS_NAMESPACES", ""),
                   help="comma-separated namespaces whose containers that mount the host's /sys get the node's "
                        "sysfs there (node-feature-discovery, GPU feature discovery), * for all "
                        "(default: none)")
    p.add_argument("--opt-annotation", default=_env("MOKKA_NRI_OPT_ANNOTATION", "mokka.nvidia.com/inject"),
                   help='pod annotation: "false" opts out, "true" opts in (default %(default)s)')
    p.add_argument("--devices-annotation", default=_env("MOKKA_NRI_DEVICES_ANNOTATION", "mokka.nvidia.com/devices"),
                   help='pod annotation: "true" or "false" overrides --devices for that pod (default %(default)s)')
    p.add_argument("--devices", choices=DEVICE_MODES, default=_env("MOKKA_NRI_DEVICES", "all"),
                   help="add /dev/nvidia*: all (unless the pod says false), annotated (only when it says "
                        "true), none (default %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every container event (debug level)")
    return p


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def nri_main(argv: Sequence[str] | None = None) -> int:
    from . import require_extra
    from .health import HealthServer

    args = nri_parser().parse_args(argv)
    require_extra("google.protobuf")
    from ..stage.paths import CLUSTER_ROOT
    from .nri.inject import InjectConfig
    from .nri.plugin import NriPlugin, PluginSettings

    _logging(args.verbose)
    root = args.root or Path(os.environ.get("MOKKA_ROOT") or CLUSTER_ROOT)
    try:
        settings = PluginSettings(
            inject=InjectConfig(root=root, mount_path=args.mount_path, namespaces=_csv(args.namespaces),
                                excluded_namespaces=_csv(args.excluded_namespaces),
                                opt_annotation=args.opt_annotation, devices_annotation=args.devices_annotation,
                                devices=args.devices, sysfs_namespaces=_csv(args.sysfs_namespaces)),
            socket=args.socket, name=args.plugin_name, index=args.plugin_index, health_addr=args.health_addr)
    except ValueError as exc:
        print(f"mokka-nri: {exc}", file=sys.stderr)
        return 2
    plugin = NriPlugin(settings)

    def serve(stop: threading.Event, ready: threading.Event) -> None:
        health = HealthServer(settings.health_addr, plugin.live, plugin.ready).start() if settings.health_addr else None
        if health is not None:
            logging.getLogger("mokka.nri").info("health on %s (/healthz, /readyz)", settings.health_addr)
        try:
            plugin.run(stop)
        finally:
            if health is not None:
                health.stop()

    return foreground("mokka-nri", serve)
