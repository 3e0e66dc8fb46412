"""Boot partitioned: the GPU instances of each GPU's ``mig.layout``, made when the node is first staged.

The NVML library makes them, as for ``nvml-mock-ctl mig … create`` (one decider of placements and
ids): in a scratch directory, against the node's state file as it is about to be staged, before
anything is published.  The record it leaves there is the partition the plans are built with
(``StageContext.mig``); it is written beside the staged state file once the wave is published, so a
layout the library refuses publishes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from . import mig_partition, nvml_settings
from .paths import NVML_SETTINGS_FILE
from .staging import StagingError
from .store import atomic_write

if TYPE_CHECKING:
    from ..model.node import Node
    from .surface import StageContext

LIBRARY = "libnvidia-ml.so.1"


def wanted(node: Node) -> bool:
    return any(gpu.config.mig and gpu.config.mig.layout for gpu in node.gpus)


def boot_record(node: Node, ctx: StageContext) -> str:
    """The setter record holding every GPU's boot layout (raises StagingError naming the layout)."""
    import tempfile  # only where a node boots partitioned: a ctl change loads neither

    from .nvml_view import render_nvml_state

    if ctx.native_dir is None or not (ctx.native_dir / LIBRARY).exists():
        raise StagingError("gpu", "mig.layout: the NVML library that makes the partition is not built "
                                  "(make -C native install)")
    with tempfile.TemporaryDirectory(prefix="mokka-mig-boot-") as scratch:
        state = Path(scratch) / "mokka-nvml.state"
        state.write_text(render_nvml_state(node, ctx.nvml, ctx.booted_ms))
        make_layouts(ctx.native_dir / LIBRARY, state, node)
        record = state.with_suffix(".settings")
        return record.read_text() if record.exists() else ""


def restore(root: Path, node: Node, indices: Iterable[int] | None = None) -> None:
    """Make the boot layouts again on a staged node (``nvml-mock-ctl reset`` cleared the partition)."""
    from .paths import LIB_DIR, NVML_STATE_FILE

    library = root / LIB_DIR / LIBRARY
    if library.exists():  # the gpu surface is staged: otherwise there is no partition to make
        make_layouts(library, root / NVML_STATE_FILE, node, indices)


def make_layouts(library: Path, state: Path, node: Node, indices: Iterable[int] | None = None) -> None:
    """Have ``library`` make each (chosen) GPU's layout on the node of ``state``."""
    from . import mig_engine

    chosen = None if indices is None else set(indices)
    for gpu in node.gpus:
        if not (gpu.config.mig and gpu.config.mig.layout) or (chosen is not None and gpu.index not in chosen):
            continue
        by_name = {profile.name: profile for profile in gpu.config.mig.gpu_instance_profiles}
        profiles = [[by_name[name].id, mig_partition.default_ci_profile(by_name[name].slices)]
                    for name in gpu.config.mig.layout]
        try:
            mig_engine.run(library, state, {"op": "create", "gpu": gpu.index, "profiles": profiles})
        except mig_engine.Refused as exc:
            raise StagingError("gpu", f"GPU {gpu.index}: mig.layout {', '.join(gpu.config.mig.layout)} "
                                      f"does not fit: {exc}") from None


def partitions(record: str) -> dict[int, tuple[mig_partition.GpuInstance, ...]]:
    where = Path(NVML_SETTINGS_FILE)
    return mig_partition.decode(nvml_settings.parse(record, where), where) if record else {}


def publish(root: Path, record: str) -> None:
    """Put the boot record in place beside the staged state file (under the library's lock)."""
    if record:
        with nvml_settings.locked(root):
            atomic_write(root / NVML_SETTINGS_FILE, record, durable=True)
