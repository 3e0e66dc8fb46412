"""The contract every ``mokka-sim-<name>`` package keeps, as reusable pytest tests.

A sim package's ``tests/test_cli.py`` subclasses :class:`SimContract`, names its
app and surface, and adds only what is specific to it::

    class TestContract(SimContract):
        app = app
        surface = PciSurface
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from ..errors import MokkaError
from ..model.apply import apply
from ..model.codec import decode
from ..model.config import BLOCKS, LISTS, GpuConfig
from ..model.node import Node
from ..model.spec import NodeSpec
from ..model.value import Value
from ..schema.profile import DeviceConfig
from ..stage import paths
from ..stage.native import native_dir
from ..stage.render import plan_digest
from ..stage.surface import StageContext, Surface, discover

runner = CliRunner()


def variants(node: Node, field: str) -> Iterator[Node]:
    """``node`` with one value inside GPU configuration field ``field`` changed on every GPU, each way it can.

    Numbers grow, flags flip, a choice takes each other value the documents allow, a missing block
    appears, a tuple gains an item: every leaf of the field in turn.
    """
    first = getattr(node.gpus[0].config, field)
    for path, others in _leaves(first, GpuConfig, field):
        for k in range(others):
            gpus = []
            for gpu in node.gpus:
                config = gpu.config.replace(**{field: _changed(getattr(gpu.config, field), GpuConfig, field, path, k)})
                gpus.append(gpu.replace(config=config))
            yield node.replace(gpus=tuple(gpus))


def _choices(owner: type, field: str) -> tuple[Any, ...]:
    """The values the documents allow for ``owner.field``, where they name them (a Literal)."""
    if not _CHOICES:
        for model in _document_models(DeviceConfig):
            owner_name = "GpuConfig" if model is DeviceConfig else model.__name__
            for name, info in model.model_fields.items():
                literal = [arg for arg in _flat(info.annotation) if get_origin(arg) is Literal]
                if literal:
                    _CHOICES[(owner_name, name)] = tuple(v for arg in literal for v in get_args(arg))
    return _CHOICES.get((owner.__name__, field), ())


_CHOICES: dict[tuple[str, str], tuple[Any, ...]] = {}
#: an item for the configuration's tuples of blocks
_ITEMS: dict[str, dict[str, Any]] = {"processes": {"pid": 4242, "name": "probe", "used_memory_mib": 7},
                                     "xid_events": {"code": 13, "seq": 9999}, "memory_clocks": {"freq_mhz": 1000},
                                     "gpu_instance_profiles": {"name": "1g.5gb", "id": 99, "nvml_profile": 0,
                                                               "slices": 1, "instances": 1, "memory_mb": 4864,
                                                               "multiprocessors": 14, "placement_size": 1,
                                                               "placements": [0]}}


def _leaves(value: Any, owner: type, field: str) -> Iterator[tuple[tuple[str, ...], int]]:
    """(path inside the value, how many other values it can take) of every leaf."""
    if isinstance(value, Value):
        for name in value.__slots__:
            for path, others in _leaves(getattr(value, name), type(value), name):
                yield (name, *path), others
    elif value is None and BLOCKS.get(owner, {}).get(field) is not None:
        yield (), 1 if _fresh(BLOCKS[owner][field]) is not None else 0
    else:
        choices = _choices(owner, field)
        yield (), max(len(choices) - 1, 0) if choices else 1


def _changed(value: Any, owner: type, field: str, path: tuple[str, ...], k: int) -> Any:
    if path:
        if not isinstance(value, Value):
            return value  # this GPU lacks the block the first has
        inner = getattr(value, path[0])
        return value.replace(**{path[0]: _changed(inner, type(value), path[0], path[1:], k)})
    choices = _choices(owner, field)
    if choices:
        return [choice for choice in choices if choice != value][k % max(len(choices) - 1, 1)]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        item_class = LISTS.get(owner, {}).get(field)
        return (*value, decode(item_class, _ITEMS.get(field, {})) if item_class is not None else 1)
    if value is None:
        block = BLOCKS.get(owner, {}).get(field)
        return _fresh(block) if block is not None else "x"
    return value


def _fresh(block: type) -> Any:
    try:
        return block()
    except TypeError:  # a block with required values: no default to make one from
        return None


def _document_models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [model]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        yield current
        for info in current.model_fields.values():
            todo += [arg for arg in _flat(info.annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]


def _flat(annotation: Any) -> Iterator[Any]:
    yield annotation
    if get_origin(annotation) is not Literal:
        for arg in get_args(annotation):
            yield from _flat(arg)


#: boards that between them have every feature a plan may read (fabric, NVSwitches, HCAs, C2C, no NVLink)
READS_PROFILES = ("h100", "gb200", "t4", "a100")


class ReadsContract:
    """What a surface builds from a node changes with nothing but what it declares it reads: each plan part
    with its own ``reads``, and the contributions to the gpu surface with the surface's (mixed into SimContract)."""

    surface: ClassVar[type[Surface]]

    @pytest.mark.parametrize("profile", READS_PROFILES)
    def test_the_plan_reads_only_what_the_surface_declares(self, profile: str, tmp_path: Path) -> None:
        surface = self.surface()

        def digest_of(build: Callable[[Node, StageContext], list[Any]]) -> Callable[[Node, StageContext], str]:
            return lambda node, ctx: plan_digest(build(node, ctx))

        declared: list[tuple[str, frozenset[str], Callable[[Node, StageContext], Any]]] = [
            (f"plan part {part.name}", part.reads, digest_of(part.build))
            for part in surface.parts() if part.reads is not None]
        if surface.reads is not None:
            declared.append(("contribution", surface.reads,
                             lambda node, ctx: (surface.nvml(node, ctx), surface.char_majors(node, ctx))))
        if not declared:
            pytest.skip("the surface reads every field")
        ctx = StageContext(root=tmp_path, native_dir=native_dir())
        node = NodeSpec(profile=profile, gpus=2).resolve()
        before = [build(node, ctx) for _, _, build in declared]
        for field in GpuConfig.__slots__:
            unread = [(n, what, build) for n, (what, reads, build) in enumerate(declared) if field not in reads]
            for changed in variants(node, field) if unread else ():
                for n, what, build in unread:
                    assert build(changed, ctx) == before[n], f"{self.surface.name}: {what} reads {field}"


#: what a surface's long-lived service must not load at start-up: each node runs one of each, so their start
#: is in every ``mokka run`` and their memory in every node at rest (``service_may_load`` lifts some)
SERVICE_HEAVY = frozenset({"pydantic", "typer", "click", "rich", "yaml", "watchdog", "supervisor", "logging",
                           "dataclasses", "asyncio", "subprocess"})
SERVICE_IMPORTS = """
import importlib, sys
importlib.import_module(sys.argv[1])
print(sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[2:])))
"""


class SimContract(ReadsContract):
    app: ClassVar[typer.Typer]
    surface: ClassVar[type[Surface]]
    #: False for surfaces whose ``check`` needs another surface staged beside them (nvlink reads the NVML view)
    checks_alone: ClassVar[bool] = True
    #: what of ``SERVICE_HEAVY`` this surface's services need (say why where it is set)
    service_may_load: ClassVar[frozenset[str]] = frozenset()
    #: this package's own commands, whose help examples its own tests run (they need more than a root)
    own_examples: ClassVar[frozenset[str]] = frozenset()

    def test_every_help_example_runs(self, tmp_path: Path) -> None:
        """The shared commands' examples, as ``--help`` shows them, in a temporary root; serve until SIGTERM."""
        from .examples import BIN, Running, run_example, typer_examples
        from .waiting import wait_for

        examples = typer_examples(self.app)
        shared = ("stage", "check", "teardown", "plan")
        assert set(examples) == {(name,) for name in (*shared, "serve", *self.own_examples)}
        program = self.app.info.name
        assert all(example.startswith(f"{program} ") for example in examples.values()), examples
        root = tmp_path / "root"
        root.mkdir()
        if not self.checks_alone:  # check compares with the gpu surface's NVML view: staged first, as people do
            gpu = BIN / "mokka-sim-gpu"
            if not gpu.exists():
                pytest.skip("check needs the gpu surface staged beside it: mokka-sim-gpu is not installed")
            subprocess.run([str(gpu), "stage", "--root", str(root), "-p", "h100"], check=True, capture_output=True)
        for name in shared:
            run_example(examples[(name,)], root, tmp_path)
        serving = Running(examples[("serve",)], root, tmp_path)
        try:
            wait_for(lambda: serving.said("serving under"), timeout=60, what=f"{program} serve ready")
        finally:
            serving.stop()
        assert any("serving under" in line for line in serving.lines), "".join(serving.lines)

    def test_services_start_without_heavy_imports(self, tmp_path: Path) -> None:
        node = NodeSpec(profile="gb200", gpus=4).resolve()
        for service in self.surface().services(node, StageContext(root=tmp_path, booted_ms=1_700_000_000_000)):
            program = Path(service.command[0])
            # a built native program (nv-fabricmanager, mokka-kmsg, mokka-ib-responder): no interpreter
            if program != Path(sys.executable):
                assert program.parent == native_dir() and os.access(program, os.X_OK), \
                    f"{service.name}: neither a module of this Python nor a program of mokka-core's native bundle"
                continue
            assert service.command[:2] == [sys.executable, "-m"], f"{service.name}: not a module of this Python"
            heavy = sorted(SERVICE_HEAVY - self.service_may_load)
            done = subprocess.run([sys.executable, "-c", SERVICE_IMPORTS, service.command[2], *heavy],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "[]", f"{service.name} loads {done.stdout.strip()} at start-up"

    def invoke(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return runner.invoke(self.app, list(args), env=env)

    @pytest.mark.parametrize("profile", [*READS_PROFILES, "gb300", "b200", "l40s"])
    @pytest.mark.parametrize("settings", [{}, {"state": "failed"}, {"enabled": False}])
    def test_contributed_nvml_keys_are_in_the_key_table(self, profile: str, settings: dict[str, Any],
                                                          tmp_path: Path) -> None:
        """The library ignores a key it does not know: every key this surface writes must be in the table."""
        from ..stage.nvml_key_lookup import is_known_key

        node = NodeSpec(profile=profile, gpus=4, surfaces={self.surface.name: settings}).resolve()
        everything = {"all": {"nvlink_error": {"rate": 2.5, "accrued": [1, 2]}}}
        for state in (node, apply(node, everything)):
            keys = self.surface().nvml(state, StageContext(root=tmp_path, booted_ms=1_700_000_000_000))
            written = [f"system.{key}" for key, _ in keys.system]
            written += [f"device.{index}.{key}" for index, pairs in keys.devices.items() for key, _ in pairs]
            unknown = [key for key in written if not is_known_key(key)]
            assert not unknown, f"{self.surface.name} writes keys that are not in native/state-keys.toml: {unknown}"

    def test_registered_as_surface(self) -> None:
        assert discover()[self.surface.name] is self.surface

    def test_help_names_every_verb(self) -> None:
        result = self.invoke("--help")
        assert result.exit_code == 0
        for verb in ("stage", "teardown", "serve", "check", "plan"):
            assert verb in result.output

    def test_stage_and_teardown_leave_no_residue(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        staged = self.invoke("stage", "--root", str(root), "--profile", "h100")
        assert staged.exit_code == 0, staged.output + repr(staged.exception)
        if self.checks_alone:
            checked = self.invoke("check", "--root", str(root), "--profile", "h100")
            assert checked.exit_code == 0, checked.output
        assert self.invoke("teardown", "--root", str(root)).exit_code == 0
        assert list(root.iterdir()) == []

    def test_unknown_profile_is_refused(self) -> None:
        result = self.invoke("plan", "--profile", "v100")
        assert result.exit_code != 0
        assert "available profiles" in str(result.exception) + result.output

    def test_root_comes_from_mokka_root(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        staged = self.invoke("stage", "--profile", "h100", env={"MOKKA_ROOT": str(root)})
        assert staged.exit_code == 0, staged.output + repr(staged.exception)
        assert list(root.iterdir())
        assert self.invoke("teardown", env={"MOKKA_ROOT": str(root)}).exit_code == 0
        assert list(root.iterdir()) == []

    def test_no_root_is_refused_and_nothing_is_written(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without --root, $MOKKA_ROOT or a cluster node, / is never assumed: it takes --root / to mean it."""
        monkeypatch.delenv("MOKKA_ROOT", raising=False)
        monkeypatch.setattr(paths, "CLUSTER_ROOT", tmp_path / "no-cluster-node")
        monkeypatch.chdir(tmp_path)
        before = {p: sorted(os.listdir(p)) for p in ("/", "/var/lib/mokka") if os.path.isdir(p)}
        for verb in ("stage", "check", "teardown", "serve"):
            result = self.invoke(verb, *(["--profile", "h100"] if verb != "teardown" else []))
            assert result.exit_code != 0, verb
            assert isinstance(result.exception, MokkaError), (verb, result.output, result.exception)
            assert "no node root: give --root DIR" in str(result.exception)
        assert {p: sorted(os.listdir(p)) for p in before} == before
        assert list(tmp_path.iterdir()) == []
