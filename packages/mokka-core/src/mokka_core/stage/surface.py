"""The surface plugin interface and discovery of installed surfaces.

A surface turns a :class:`Node` into a *plan*: the files, links, directories
and device nodes it wants under a root.  The plan is pure data; ``staging``
materialises it all-or-nothing and records what it created so teardown leaves no
residue.  Long-lived parts are declared as :class:`Service` entries, and what a
consumer process needs (preloaded libraries, environment) as :class:`ConsumerNeeds`:
``mokka node up`` (under supervisord), ``mokka run``/``mokka shim`` and
``mokka-sim-<name> serve`` all run the same declarations.

Packages register surfaces through the ``mokka.surfaces`` entry-point group::

    [project.entry-points."mokka.surfaces"]
    pci = "mokka_sim_pci.surface:PciSurface"
"""

from __future__ import annotations

import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Union

if TYPE_CHECKING:
    from ..model.node import Node
    from .mig_partition import GpuInstance


ENTRY_POINT_GROUP = "mokka.surfaces"


class Dir(NamedTuple):
    path: str
    mode: int = 0o755


class File(NamedTuple):
    path: str
    content: bytes | str
    mode: int = 0o644

    def data(self) -> bytes:
        return self.content.encode() if isinstance(self.content, str) else self.content


class Copy(NamedTuple):
    path: str
    source: Path
    mode: int | None = None  # None keeps the source's mode


class Symlink(NamedTuple):
    path: str
    target: str


class CharDevice(NamedTuple):
    path: str
    major: int
    minor: int
    mode: int = 0o666


class Runtime(NamedTuple):
    """A file the running node writes itself (the NVML setter record): never staged nor replaced by a
    restage, owned by the surface so that teardown removes it."""

    path: str


Entry = Union[Dir, File, Copy, Symlink, CharDevice, Runtime]


class Service(NamedTuple):
    """A long-lived foreground program of a surface (supervisord runs it under ``mokka node up``)."""

    name: str
    command: list[str]
    environment: Mapping[str, str] = MappingProxyType({})
    #: a path under the root that exists once the service is ready; None: ready once started
    ready_path: str | None = None


class ConsumerNeeds(NamedTuple):
    """What a process using the node needs besides the staged files: libraries to preload, environment."""

    preload: tuple[str, ...] = ()
    environment: Mapping[str, str] = MappingProxyType({})

    @classmethod
    def combine(cls, needs: Iterable[ConsumerNeeds]) -> ConsumerNeeds:
        preload: list[str] = []
        environment: dict[str, str] = {}
        for need in needs:
            preload += [lib for lib in need.preload if lib not in preload]
            environment.update(need.environment)
        return cls(tuple(preload), environment)

    def apply(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with these needs: the environment set, the libraries put first in LD_PRELOAD."""
        out = {**env, **self.environment}
        if self.preload:
            out["LD_PRELOAD"] = ":".join([*self.preload, *filter(None, [env.get("LD_PRELOAD")])])
        return out



class NvmlKeys(NamedTuple):
    """What a surface contributes to the NVML state file: node-wide keys and keys per GPU index.

    Keys are those of ``native/state-keys.toml`` (``stage.nvml_keys``), without the ``system.`` /
    ``device.<i>.`` prefix.  A contributed key replaces the gpu surface's own default for it.
    """

    system: tuple[tuple[str, object], ...] = ()
    devices: Mapping[int, tuple[tuple[str, object], ...]] = MappingProxyType({})


class StageContext(NamedTuple):
    """Where a surface is staged, and the few facts about this installation a plan may need."""

    root: Path
    native_dir: Path | None = None  # built mock libraries (libnvidia-ml.so.*), see mokka_core.stage.native
    #: wall-clock ms the node came up (``stage.nodefile``); 0 outside a node: fault clocks start there
    booted_ms: int = 0
    #: the other surfaces' contributions to the NVML state file (for the gpu surface, which writes it)
    nvml: tuple[NvmlKeys, ...] = ()
    #: the other enabled surfaces' ``/proc/devices`` lines (for the gpu surface, the driver, which stages it)
    char_majors: tuple[tuple[int, str], ...] = ()
    #: each GPU's MIG partition (by GPU index), as the NVML setter record holds it: what the C library
    #: made (nvidia-smi, ``nvml-mock-ctl mig``, the profile's boot layout); ``stage.mig_partition``
    mig: Mapping[int, tuple[GpuInstance, ...]] = MappingProxyType({})
    #: the host's kernel log the node's kernel-log records are also written to (``mokka node up
    #: --host-kmsg``); None: the node keeps them to itself.  Read by services, never by plans.
    host_kmsg: str | None = None


class PlanPart(NamedTuple):
    """A piece of a surface's plan that ``render`` may keep while a change touches none of its ``reads``
    (GPU configuration fields, as :attr:`Surface.reads`; None: all of them).  ``build`` is pure, like
    :meth:`Surface.plan`; the plan is its parts' entries in order."""

    name: str
    build: Callable[[Node, StageContext], list[Entry]]
    reads: frozenset[str] | None = None


class Surface(ABC):
    """One simulated layer of a GPU node (gpu, pci, cdi, imex, nvlink, fabricmanager, ib)."""

    name: ClassVar[str]
    #: the fields of a GPU's configuration (``GpuConfig``) the plan, ``nvml`` and ``char_majors`` read,
    #: besides everything outside the configurations; None: all of them.  A change of only other
    #: fields leaves them as they are, and ``render`` does not build them again
    #: (``testing.sim_contract`` checks the declaration).
    reads: ClassVar[frozenset[str] | None] = None

    @abstractmethod
    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        """Everything this surface wants under ``ctx.root`` for ``node``; must not touch the disk."""

    def parts(self) -> tuple[PlanPart, ...]:
        """The plan in pieces that read fewer fields than the whole (default: one piece, the plan)."""
        return (PlanPart(self.name, self.plan, self.reads),)

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        return []

    def nvml(self, node: Node, ctx: StageContext) -> NvmlKeys:
        """The keys this surface contributes to the NVML state file (default: none); pure, like the plan."""
        return NvmlKeys()

    def char_majors(self, node: Node, ctx: StageContext) -> tuple[tuple[int, str], ...]:
        """The ``(major, name)`` lines this surface's driver registers in ``/proc/devices`` (default: none);
        its staged device nodes are on these majors.  Pure, like the plan."""
        return ()

    def consumer(self, node: Node, ctx: StageContext) -> ConsumerNeeds:
        """What a consumer process of this node needs from this surface (default: nothing)."""
        return ConsumerNeeds()

    def check(self, node: Node, ctx: StageContext) -> list[str]:
        """Problems found in what is staged now (empty list: all good)."""
        problems = []
        for entry in self.plan(node, ctx):
            if isinstance(entry, Runtime):
                continue  # present only once the node has written it
            target = ctx.root / entry.path
            if not (target.exists() or target.is_symlink()):
                problems.append(f"{self.name}: missing /{entry.path}")
            elif isinstance(entry, File) and target.is_file():
                try:
                    differs = target.read_bytes() != entry.data()
                except PermissionError:  # write-only as in sysfs (a module's uevent, 0200): only root reads it back
                    differs = stat.S_IMODE(target.stat().st_mode) != entry.mode
                if differs:
                    problems.append(f"{self.name}: /{entry.path} differs from the node state")
        return problems


def discover() -> dict[str, type[Surface]]:
    """Installed surfaces by name, from the ``mokka.surfaces`` entry points."""
    from importlib.metadata import entry_points  # tens of ms to import: only where surfaces are discovered

    found: dict[str, type[Surface]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        surface = ep.load()
        if not (isinstance(surface, type) and issubclass(surface, Surface)):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a mokka_core.stage.surface.Surface")
        found[ep.name] = surface
    return dict(sorted(found.items()))
