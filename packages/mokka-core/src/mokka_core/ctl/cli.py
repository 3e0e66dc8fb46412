"""The ``nvml-mock-ctl`` command line.

argparse, not typer: a ctl change must reach consumers within 250 ms of the
command starting, interpreter start-up included, so this module imports only the
standard library; the node code (pydantic, YAML) is imported after parsing.
Exit status: 0 applied, 1 refused (the message names what is wrong; the override
file is unchanged), 2 usage.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model.node import Node
    from ..stage.surface import Surface
    from .store import Outcome

PROG = "nvml-mock-ctl"
_CAPTURE = threading.Lock()
TARGET_HELP = "GPU: all, an index, a UUID or a PCI bus id, or a list and ranges of them (0,2 or 0-3)"

DESCRIPTION = """\
Change a simulated GPU node at runtime: break a GPU, set a metric, fail a surface.
Every change is validated against the node, written to the override file under a
lock, and re-rendered at once; running consumers see it within one library check.
The node is found from --root, else $MOKKA_ROOT, else the cluster root, else /."""

EXAMPLES = {
    "fail": "nvml-mock-ctl fail 3 fallen-off-bus    # GPU 3 lost in NVML, config space ff, Xid 79",
    "xid": "nvml-mock-ctl xid 0 13                 # raise Xid 13 on GPU 0",
    "temp": "nvml-mock-ctl temp all 85              # every GPU reads 85 C",
    "power": "nvml-mock-ctl power 2 450.5           # GPU 2 draws 450.5 W",
    "util": "nvml-mock-ctl util 1 90 --memory 40   # GPU 1 at 90 % (memory 40 %)",
    "clocks": "nvml-mock-ctl clocks 0 1410            # graphics and SM clock 1410 MHz",
    "throttle": "nvml-mock-ctl throttle 0 thermal power # or: nvml-mock-ctl throttle 0 none",
    "pstate": "nvml-mock-ctl pstate 0 2               # performance state P2",
    "ecc": "nvml-mock-ctl ecc 0 --correctable 12 --uncorrectable 1",
    "remapped-rows": "nvml-mock-ctl remapped-rows 0 --uncorrectable 2 --pending",
    "fabric-health": "nvml-mock-ctl fabric-health 0 degraded_bandwidth   # or: ... 0 healthy",
    "nvlink-error": "nvml-mock-ctl nvlink-error 0 250 --links 0,1       # 0 heals",
    "set": "nvml-mock-ctl set 0 fan.speed_percent=70 processes='[{pid: 42, name: train}]'",
    "enable": "nvml-mock-ctl enable imex",
    "disable": "nvml-mock-ctl disable ib",
    "fail-surface": "nvml-mock-ctl fail-surface fabricmanager   # fabric stuck in progress",
    "heal": "nvml-mock-ctl heal fabricmanager",
    "mig": "nvml-mock-ctl mig 0 on; nvml-mock-ctl mig 0 create 3g.40gb,1g.10gb; nvml-mock-ctl mig 0 destroy all",
    "status": "nvml-mock-ctl status --json",
    "reset": "nvml-mock-ctl reset 3     # or: reset all (GPU overrides), reset (everything)",
}


class _Unbuilt:
    """Stands in for the subparser of a verb this run does not parse (see ``build_parser(only=...)``)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_mutually_exclusive_group(self) -> _Unbuilt:
        return self


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` names, if it names one (the first word that is neither an option nor --root's value)."""
    words = iter(argv)
    for word in words:
        if word == "--root":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in EXAMPLES else None
        elif word in ("-h", "--help"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, just that verb's part (what a change needs: each subparser
    costs about a millisecond to build, and a ctl change has a budget of a hundred)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", type=Path, default=argparse.SUPPRESS,
                        help="node root (default: $MOKKA_ROOT, the cluster root, or / where a node is staged there)")
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, parents=[common],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.values()))
    from ..version import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    from .shell import ShellAction

    parser.add_argument("--install-completion", action=ShellAction,
                        help="install shell completion for the shell it runs in (or SHELL: bash, zsh)")
    parser.add_argument("--show-completion", action=ShellAction,
                        help="print the shell completion, to copy it or customize the installation")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)

    def verb(name: str, summary: str) -> Any:
        if only is not None and name != only:
            return _Unbuilt()
        return verbs.add_parser(name, help=summary, description=summary, parents=[common],
                                epilog=f"example:\n  {EXAMPLES[name]}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)

    def target(sub: Any) -> None:
        sub.add_argument("gpu", metavar="GPU", help=TARGET_HELP)

    sub = verb("fail", "Put a GPU in a failure mode (or back to healthy).")
    target(sub)
    sub.add_argument("mode", metavar="MODE", help="lost | fallen-off-bus | ecc-uncorrectable | healthy")
    sub = verb("xid", "Raise an Xid event on a GPU.")
    target(sub)
    sub.add_argument("code", type=int, metavar="CODE", help="Xid code, e.g. 13, 31, 48, 79")
    sub = verb("temp", "Pin the GPU temperature (0-200 C).")
    target(sub)
    sub.add_argument("celsius", type=int, metavar="C", help="temperature in degrees Celsius")
    sub = verb("power", "Pin the power draw in watts (0 up to the GPU's max power limit).")
    target(sub)
    sub.add_argument("watts", type=float, metavar="W", help="power draw in watts")
    sub = verb("util", "Pin GPU (and memory) utilization in percent.")
    target(sub)
    sub.add_argument("percent", type=int, metavar="PCT", help="GPU utilization, 0-100")
    sub.add_argument("--memory", type=int, metavar="PCT", help="memory utilization (default: same as GPU)")
    sub = verb("clocks", "Set the current graphics/SM clock in MHz (up to the GPU's max).")
    target(sub)
    sub.add_argument("mhz", type=int, metavar="MHZ", help="graphics/SM clock in MHz")
    sub.add_argument("--memory", type=int, metavar="MHZ", help="current memory clock")
    sub = verb("throttle", "Set the active clock throttle reasons (all others cleared).")
    target(sub)
    sub.add_argument("reasons", nargs="+", metavar="REASON",
                     help="thermal, sw_thermal, power, power_brake, idle, app_clocks, display_clocks, "
                          "hw_slowdown, sync_boost (or canonical names), or none")
    sub = verb("pstate", "Set the performance state (0-15 or P0-P15).")
    target(sub)
    sub.add_argument("state", metavar="N", help="0-15 or P0-P15")
    sub = verb("ecc", "Set ECC error counts in device memory.")
    target(sub)
    sub.add_argument("--correctable", type=int, metavar="N", help="single-bit (corrected) errors")
    sub.add_argument("--uncorrectable", type=int, metavar="N", help="double-bit (uncorrected) errors")
    kind = sub.add_mutually_exclusive_group()
    kind.add_argument("--volatile", dest="kinds", action="store_const", const=["volatile"],
                      help="only the volatile counters (since the last reset)")
    kind.add_argument("--aggregate", dest="kinds", action="store_const", const=["aggregate"],
                      help="only the aggregate (lifetime) counters")
    sub = verb("remapped-rows", "Set row-remapping counters and flags.")
    target(sub)
    sub.add_argument("--correctable", type=int, metavar="N", help="rows remapped for correctable errors")
    sub.add_argument("--uncorrectable", type=int, metavar="N", help="rows remapped for uncorrectable errors")
    sub.add_argument("--pending", action=argparse.BooleanOptionalAction, default=None,
                     help="a remap is pending (needs a GPU reset)")
    sub.add_argument("--failure", action=argparse.BooleanOptionalAction, default=None,
                     help="a remap has failed")
    sub = verb("fabric-health", "Set NVLink fabric health flags (all others cleared).")
    target(sub)
    sub.add_argument("flags", nargs="+", metavar="FLAG",
                     help="degraded_bandwidth, route_recovery, route_unhealthy, access_timeout_recovery, "
                          "a misconfiguration name, or healthy")
    sub = verb("nvlink-error", "Set an NVLink error rate (errors/s; 0 heals).")
    target(sub)
    sub.add_argument("rate", type=float, metavar="RATE", help="errors per second (0 heals)")
    sub.add_argument("--links", type=_links, metavar="N,N", help="affected links (default: all)")
    sub = verb("set", "Set any per-GPU value by its profile key path (value parsed as YAML).")
    target(sub)
    sub.add_argument("assignments", nargs="+", metavar="KEY=VALUE",
                     help="profile key path under the GPU and its value (YAML), e.g. fan.speed_percent=70")
    for name, summary in (("enable", "Stage a surface."), ("disable", "Remove a surface."),
                          ("fail-surface", "Stage a surface in its realistic failed form."),
                          ("heal", "Return a failed surface to healthy.")):
        sub = verb(name, summary)
        sub.add_argument("surface", metavar="SURFACE",
                         help="gpu, pci, cdi, imex, nvlink, fabricmanager or ib")
    sub = verb("mig", "MIG on a GPU: on, off, create GPU instances (with compute instances), destroy, list.")
    if not isinstance(sub, _Unbuilt):
        from .mig import add_arguments

        add_arguments(sub)
    sub = verb("status", "Show the node now: per GPU health, temperature, power, faults; surfaces.")
    sub.add_argument("--json", action="store_true", help="print JSON")
    sub = verb("reset", "Clear overrides: of one GPU, of all GPUs (all), or everything (no argument).")
    sub.add_argument("gpu", nargs="?", metavar="GPU", help=TARGET_HELP)
    return parser


def _links(text: str) -> list[int]:
    try:
        links = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated link numbers, got {text!r}") from None
    if any(n < 0 for n in links):
        raise argparse.ArgumentTypeError("link numbers must be >= 0")
    return links


def mutation(args: argparse.Namespace) -> Any:
    from . import verbs

    match args.verb:
        case "fail":
            return verbs.fail(args.gpu, args.mode)
        case "xid":
            return verbs.xid(args.gpu, args.code)
        case "temp":
            return verbs.temperature(args.gpu, args.celsius)
        case "power":
            return verbs.power(args.gpu, args.watts)
        case "util":
            return verbs.utilization(args.gpu, args.percent, args.memory)
        case "clocks":
            return verbs.clocks(args.gpu, args.mhz, args.memory)
        case "throttle":
            return verbs.throttle(args.gpu, args.reasons)
        case "pstate":
            return verbs.pstate(args.gpu, args.state)
        case "ecc":
            return verbs.ecc(args.gpu, args.correctable, args.uncorrectable, args.kinds or ["volatile", "aggregate"])
        case "remapped-rows":
            return verbs.remapped_rows(args.gpu, args.correctable, args.uncorrectable, args.pending, args.failure)
        case "fabric-health":
            return verbs.fabric_health(args.gpu, args.flags)
        case "nvlink-error":
            return verbs.nvlink_error(args.gpu, args.rate, args.links)
        case "set":
            return verbs.set_values(args.gpu, args.assignments)
        case "enable" | "disable" | "heal":
            return verbs.surface(args.verb, args.surface)
        case "fail-surface":
            return verbs.surface("fail", args.surface)
        case "reset":
            return verbs.reset(args.gpu)
    raise AssertionError(args.verb)


def execute(argv: Sequence[str] | None = None, *, surfaces: Mapping[str, Surface] | None = None,
            root: Path | None = None) -> int:
    """Run one ctl command; returns the exit status (``surfaces`` replaces discovery, for tests;
    ``root``: the node daemon runs a relayed command on its own node, whatever --root spelled)."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(verb_of(words))
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return int(exc.code or 0)
    from ..errors import MokkaError
    from ..stage.paths import find_root

    try:
        root = (root or find_root(getattr(args, "root", None))).absolute()
        message, outcome = perform(root, [args], surfaces=surfaces)
    except MokkaError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`| head`): nothing wrong with the command
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. not allowed to write the node's state directory
        print(f"{PROG}: {unchanged_message(exc)}", file=sys.stderr)
        return 1
    try:
        print(message, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if outcome is not None and os.environ.get("MOKKA_CTL_VERBOSE"):
        print(f"rendered: {outcome.render.summary()}", file=sys.stderr)
        print(f"node from: {'snapshot' if outcome.from_snapshot else 'files'}; "
              f"pydantic loaded: {'pydantic' in sys.modules}", file=sys.stderr)
    return 0


def execute_captured(words: Sequence[str], root: Path) -> tuple[int, str, str]:
    """Run one command for a client of the node daemon (``ctl.relay``): its exit status, and what it
    printed to standard output and standard error.  One at a time: the capture is process-wide."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with _CAPTURE, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = execute(words, root=root)
    return status, out.getvalue(), err.getvalue()


def parse_in_process(words: Sequence[str]) -> argparse.Namespace | str:
    """``words`` parsed as the command line parses them, for a caller in this process (``Node.ctl``):
    the parsed command, or the text ``--help`` prints; a usage error raises :class:`CtlError` (status 2)
    carrying what the command line would print."""
    import contextlib
    import io

    from ..errors import CtlError

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return _parser(verb_of(words)).parse_args(words)
    except SystemExit as exc:
        if exc.code:
            raise CtlError(err.getvalue().strip(), status=2) from None
        return out.getvalue()


@functools.cache
def _parser(only: str | None) -> argparse.ArgumentParser:
    """A process that runs many commands (``Node.ctl``) builds each verb's parser once."""
    return build_parser(only)


def perform(root: Path, batch: Sequence[argparse.Namespace], *,
            surfaces: Mapping[str, Surface] | None = None) -> tuple[str, Outcome | None]:
    """Carry out parsed commands on the node under ``root``: their message, and the outcome of a change.

    Several changes are one transaction (one lock, one render); ``status`` stands alone.  Raises
    MokkaError (refused) or OSError.
    """
    from ..errors import MokkaError
    from ..stage.store import NodeStore

    if not NodeStore(root).node_file.exists():
        from ..stage import nodefile

        raise nodefile.no_node(root)
    if any(args.verb == "status" for args in batch):
        if len(batch) != 1:
            raise MokkaError("status shows the node and changes nothing: it cannot be part of a batch")
        return status_text(root, batch[0].json), None
    if any(args.verb == "mig" for args in batch):
        if len(batch) != 1:
            raise MokkaError("mig changes the partition through the NVML library: it cannot be part of a batch")
        from . import mig

        return mig.perform(root, batch[0], surfaces), None
    from .store import apply

    first = batch[0]
    outcome = apply(root, [mutation(args) for args in batch], surfaces=surfaces,
                    start_empty=first.verb == "reset" and not first.gpu,
                    validate=any(args.verb == "set" for args in batch))
    message = outcome.message
    for args in batch:
        if args.verb != "reset":
            continue
        cleared = _clear_nvml_settings(root, outcome.node, args.gpu)
        if cleared:
            message = f"{message}; NVML settings cleared"
        from .mig import follow_settings, restore_layouts

        if restore_layouts(root, outcome.node, args.gpu) or cleared:
            follow_settings(root, surfaces)
    return message, outcome._replace(message=message)


def unchanged_message(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}; nothing was changed"


def _clear_nvml_settings(root: Path, node: Node, target: str | None) -> bool:
    """``reset`` also drops what NVML setters changed: on every GPU, or on the chosen ones."""
    from ..stage import nvml_settings
    from .verbs import select

    chosen = select(node, target) if target else None
    return nvml_settings.clear(root, None if chosen is None else [gpu.index for gpu in chosen])


def status_text(root: Path, as_json: bool) -> str:
    import json

    from ..stage import snapshot
    from .report import node_summary, table

    snap = snapshot.load(root)
    if snap is not None:
        node = snap.node()
    else:
        from ..stage import nodefile

        node = nodefile.load(root).resolve()
    summary = node_summary(node, root)
    return json.dumps(summary, indent=2) if as_json else table(summary)


def main() -> None:
    # pydantic scans every installed distribution for plugins before building the first model;
    # the ctl uses none, and a change must land fast
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        code = execute()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`nvml-mock-ctl status | head`): stop quietly, as coreutils do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
