"""What one run of the node daemon is configured with; passed explicitly, no globals (kopf's configs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..model.spec import NodeSpec


@dataclass(frozen=True)
class NodeSettings:
    root: Path
    spec: NodeSpec = field(default_factory=NodeSpec)
    #: installed surfaces to run (``--surfaces``); None: all of them
    only: tuple[str, ...] | None = None
    #: run surface services under supervisord (tests without services may turn it off)
    supervise: bool = True
    #: watch the profile, overlay, surfaces and override files and re-render on change
    watch: bool = True
    #: seconds teardown may take in all, whatever happens meanwhile
    teardown_deadline_s: float = 10.0
    #: seconds supervisord gives each program between SIGTERM and SIGKILL
    service_stop_wait_s: int = 3
    #: settle time after a file event before re-rendering (editors write in several steps)
    debounce_s: float = 0.02
    #: safety-net re-check of the watched files even without events
    poll_s: float = 2.0
    #: runs the nvml-mock-ctl commands clients hand to the daemon's socket (``node.relay``):
    #: ``ctl.cli.execute_captured``; None: no socket, every ctl command runs in its own process
    ctl: Callable[[Sequence[str], Path], tuple[int, str, str]] | None = None
    #: the host's kernel log (``--host-kmsg``) every record of the node's kernel log is also written to,
    #: once; None: nothing is written outside the root
    host_kmsg: str | None = None
    #: the host's CDI directory as mounted here (``--cdi-spec-dir``): ``nvidia.yaml`` there links to the root's
    #: spec (``node.cdi_link``); None: the spec stays under the root
    cdi_spec_dir: str | None = None
    #: where the node's log lines go besides the node log (``mokka node up``: stdout); None: the node log only
    log_echo: TextIO | None = None
    #: seconds a ready node with nothing to do waits before the daemon execs its lean form (``node.rest``);
    #: None: it never rests (a daemon run from a thread never does: only a main thread may exec)
    rest_after_s: float | None = None
    #: the record the daemon was exec'd with from rest (``node.rest.take``): it adopts the running node
    resume: Mapping[str, Any] | None = None


#: ``mokka node up``'s rest delay (``--rest-after``)
REST_AFTER_S = 5.0
