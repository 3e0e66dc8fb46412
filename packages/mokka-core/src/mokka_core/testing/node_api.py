"""``mokka_core.Node``: a simulated node inside a test, staged in a private temporary root.

No root privileges and no namespace: the node is staged the way ``mokka shim`` stages it
(:func:`~mokka_core.run.command.plan_node` and :func:`~mokka_core.run.command.stage_node`), its
services (on request) are started as ``mokka run`` starts them, and closing it stops them and
removes the root.  Changes go through the ``nvml-mock-ctl`` code in this process; :meth:`Node.activate`
makes this process's NVML the node's, :attr:`Node.env` is what a subprocess needs to see it,
and :meth:`Node.run` runs a command with the node at the real paths (as ``mokka run`` does).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ..ctl import cli as ctl_cli
from ..errors import CtlError, MokkaError
from ..model.spec import NodeSpec, surface_settings
from ..run import command, namespace
from ..run.services import Services
from ..schema.builtin import DEFAULT_PROFILE
from ..stage.beneath import check_root
from ..stage.paths import LIB_DIR, NVML_STATE_FILE
from ..stage.surface import ConsumerNeeds, Surface, discover
from . import activation

#: where nodes are staged when the machine has it: staging on tmpfs is several times faster than on disk
FAST_TMP = Path("/dev/shm")


@functools.cache
def installed() -> dict[str, type[Surface]]:
    """The installed surfaces, found once per process (scanning the entry points costs every node ~25 ms)."""
    return discover()


class Node:
    """A staged node; use as a context manager (``with Node("t4", gpus=2) as node: ...``).

    ``services``: also start the node's long-lived services (the fake fabric manager, the IB
    responder) and wait until they are ready, which takes seconds; without them a fabric in state
    ``auto`` reads "not started", as on a node whose fabric manager has not come up.
    """

    DEFAULT_PROFILE = DEFAULT_PROFILE

    def __init__(self, profile: str | None = DEFAULT_PROFILE, gpus: int | None = None,
                 profile_file: str | os.PathLike[str] | None = None, fail: Iterable[str] = (),
                 disable: Iterable[str] = (), node_name: str | None = None, *, services: bool = False) -> None:
        self.spec = NodeSpec(profile=profile, profile_file=Path(profile_file) if profile_file is not None else None,
                             gpus=gpus, node_name=node_name, surfaces=surface_settings(list(disable), list(fail)))
        self.start_services = services
        self._workdir: Path | None = None
        self._services: Services | None = None
        self._needs = ConsumerNeeds()
        self._surfaces: dict[str, Surface] = {}  # the node's, for its changes (nvml-mock-ctl finds them each time)

    def __enter__(self) -> Node:
        if self._workdir is not None:
            raise MokkaError("this node is already staged: a Node is entered once")
        workdir = Path(tempfile.mkdtemp(prefix="mokka-node-", dir=FAST_TMP if os.access(FAST_TMP, os.W_OK) else None))
        self._workdir = workdir
        try:
            check_root(workdir)  # the way to it too: a temporary directory others may write is refused
            plan = command.plan_node(self.spec, workdir / "root", installed())
            self._surfaces = {name: cls() for name, cls in plan.installed.items()}
            command.stage_node(plan, workdir)
            self._needs = plan.needs
            if self.start_services:
                self._services = Services(plan.root, plan.services, log_path=workdir / command.SERVICE_LOG)
                self._services.start()
                self._services.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the node's services and remove its root (what ``with`` does on leaving); idempotent."""
        activation.release(self)
        if self._services is not None:
            self._services.stop()
            self._services = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    @property
    def root(self) -> Path:
        """The staged root: what the node's files are under, and ``$MOKKA_ROOT`` for ``nvml-mock-ctl``."""
        if self._workdir is None:
            raise MokkaError("the node is not staged: use it inside `with Node(...) as node:`")
        return self._workdir / "root"

    def ctl(self, *argv: str) -> str:
        """Run one ``nvml-mock-ctl`` command on this node (``node.ctl("temp", "0", "91")``); its message.

        A refused or malformed command raises :class:`~mokka_core.errors.CtlError` with the message
        the command line prints; the node is then unchanged.  On an active node (:meth:`activate`) this
        process's NVML has the change when ``ctl`` returns: a test reads it at once, without polling.
        """
        parsed = ctl_cli.parse_in_process(["--root", str(self.root), *argv])
        if isinstance(parsed, str):  # --help
            return parsed
        return self._perform([parsed])

    def ctl_many(self, commands: Iterable[Sequence[str]]) -> str:
        """Apply several changes as one (one lock, one render): ``[("temp", "0", "91"), ("fail", "3", "lost")]``.

        All or nothing: if one is refused, none is applied.  The message has one line per change.
        """
        batch = []
        for argv in commands:
            parsed = ctl_cli.parse_in_process(["--root", str(self.root), *argv])
            if isinstance(parsed, str):
                raise CtlError(f"not a change: {' '.join(argv)}", status=2)
            batch.append(parsed)
        if not batch:
            return ""
        return self._perform(batch)

    def _perform(self, batch: list[Any]) -> str:
        try:
            message, _ = ctl_cli.perform(self.root, batch, surfaces=self._surfaces)
        except CtlError:
            raise
        except MokkaError as exc:
            raise CtlError(str(exc)) from None
        except OSError as exc:
            raise CtlError(ctl_cli.unchanged_message(exc)) from None
        activation.refresh(self)
        return message

    def activate(self) -> None:
        """Make this process's NVML this node's: ``pynvml.nvmlInit()`` then sees it (call before pynvml
        loads a library; one active node at a time)."""
        activation.activate(self, self.root / LIB_DIR / "libnvidia-ml.so.1", self.root / NVML_STATE_FILE)

    @property
    def env(self) -> dict[str, str]:
        """This process's environment plus what makes a subprocess see this node without root or
        namespaces: its NVML library first on ``LD_LIBRARY_PATH``, ``MOKKA_NVML_STATE`` and
        ``MOKKA_ROOT`` (for ``nvml-mock-ctl``), and what its surfaces ask consumers to have."""
        root = self.root
        env = self._needs.apply(os.environ)
        library_dir = str(root / LIB_DIR)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [library_dir, os.environ.get("LD_LIBRARY_PATH")]))
        env["MOKKA_NVML_STATE"] = str(root / NVML_STATE_FILE)
        env["MOKKA_ROOT"] = str(root)
        return env

    def run(self, argv: Sequence[str], **subprocess_kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` with this node at the real paths (``/sys``, ``/dev``, ``/proc/driver``, the NVML
        library) in a private mount namespace, as ``mokka run`` does; ``subprocess.run``'s keywords.

        Needs root or unprivileged user namespaces; raises MokkaError saying why where neither is there.
        """
        refusal = namespace.refusal()
        if refusal is not None:
            raise MokkaError(f"Node.run needs a private mount namespace, and {refusal}; "
                             "node.env runs a program against the node without one")
        given = subprocess_kwargs.pop("env", None)
        env = {**self._needs.apply(os.environ if given is None else given), "MOKKA_ROOT": str(self.root)}
        return subprocess.run([sys.executable, "-m", "mokka_core.run", str(self.root), "--", *argv],
                              env=env, **subprocess_kwargs)
