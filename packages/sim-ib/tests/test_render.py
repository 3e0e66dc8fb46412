"""The staged tree: the kernel's file formats, device numbers, failed and disabled forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.model.identity import format_guid
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.surface import CharDevice, File, StageContext, Symlink
from mokka_sim_ib.config import NODE_CONFIG
from mokka_sim_ib.surface import IbSurface


def plan(profile: str = "h100", gpus: int | None = 2, node: str = "n1", **ib: object) -> dict[str, object]:
    spec = NodeSpec(profile=profile, gpus=gpus, node_name=node, surfaces={"ib": dict(ib)} if ib else {})
    entries = IbSurface().plan(spec.resolve(), StageContext(root=Path("/")))
    return {e.path: e for e in entries}


def text(entries: dict[str, object], path: str) -> str:
    entry = entries[path]
    assert isinstance(entry, File), path
    return entry.data().decode()


def hca_dir(entries: dict[str, object], name: str) -> str:
    link = entries[f"sys/class/infiniband/{name}"]
    assert isinstance(link, Symlink)
    return "sys/" + link.target.removeprefix("../../")


def test_one_hca_per_gpu_with_kernel_formats() -> None:
    entries = plan(gpus=2)
    node = NodeSpec(profile="h100", gpus=2, node_name="n1").resolve()
    assert sorted(p for p in entries if p.startswith("sys/class/infiniband/")) == [
        "sys/class/infiniband/mlx5_0", "sys/class/infiniband/mlx5_1"]
    for hca in node.hcas:
        base = hca_dir(entries, hca.name)
        assert base == f"sys/devices/{hca.root_complex}/{hca.bus_id}/infiniband/{hca.name}"
        assert text(entries, f"{base}/node_type") == "1: CA\n"
        assert text(entries, f"{base}/node_guid") == format_guid(hca.node_guid) + "\n"
        assert text(entries, f"{base}/fw_ver") == "28.39.2048\n"
        assert text(entries, f"{base}/hca_type") == "MT4129\n"
        assert text(entries, f"{base}/node_desc") == f"n1 {hca.name}\n"
        port = f"{base}/ports/1"
        assert text(entries, f"{port}/state") == "4: ACTIVE\n"
        assert text(entries, f"{port}/phys_state") == "5: LinkUp\n"
        assert text(entries, f"{port}/rate") == "400 Gb/sec (4X NDR)\n"
        assert text(entries, f"{port}/lid") == f"0x{hca.lid:x}\n"
        assert text(entries, f"{port}/sm_lid") == "0x1\n"
        assert text(entries, f"{port}/link_layer") == "InfiniBand\n"
        assert text(entries, f"{port}/gids/0") == f"fe80:0000:0000:0000:{format_guid(hca.port_guid)}\n"
        assert text(entries, f"{port}/pkeys/0") == "0xffff\n"
        assert text(entries, f"{port}/counters/port_xmit_data") == "0\n"
        device = entries[f"{base}/device"]
        assert isinstance(device, Symlink) and device.target == f"../../../{hca.bus_id}"


@pytest.mark.parametrize(("kind", "base", "sysdir", "mode"),
                         [("uverbs", 192, "infiniband_verbs", 0o666), ("umad", 0, "infiniband_mad", 0o600),
                          ("issm", 64, "infiniband_mad", 0o600)])
def test_device_nodes_match_their_dev_files(kind: str, base: int, sysdir: str, mode: int) -> None:
    """Modes as the kernel and rdma-core's udev rules leave them: verbs for every user, MADs for root only."""
    entries = plan(gpus=3)
    for n in range(3):
        node = entries[f"dev/infiniband/{kind}{n}"]
        assert isinstance(node, CharDevice) and (node.major, node.minor) == (231, base + n)
        assert node.mode == mode, oct(node.mode)
        link = entries[f"sys/class/{sysdir}/{kind}{n}"]
        assert isinstance(link, Symlink)
        class_dir = "sys/" + link.target.removeprefix("../../")
        assert text(entries, f"{class_dir}/dev") == f"231:{base + n}\n"
        assert text(entries, f"{class_dir}/ibdev") == f"mlx5_{n}\n"
    assert text(entries, "sys/class/infiniband_mad/abi_version") == "5\n"
    assert text(entries, "sys/class/infiniband_verbs/abi_version") == "6\n"


def test_failed_ports_are_down_and_polling_everywhere() -> None:
    entries = plan(gpus=2, state="failed")
    for name in ("mlx5_0", "mlx5_1"):
        port = hca_dir(entries, name) + "/ports/1"
        assert text(entries, f"{port}/state") == "1: DOWN\n"
        assert text(entries, f"{port}/phys_state") == "2: Polling\n"
        assert text(entries, f"{port}/lid") == "0x0\n"
    lines = text(entries, NODE_CONFIG).splitlines()  # the responder sees the same
    assert [ln for ln in lines if ln.startswith(("state ", "phys_state ", "lid "))] == ["lid 0", "state 1",
                                                                                        "phys_state 2"] * 2


def test_disabled_stages_nothing_and_serves_nothing() -> None:
    spec = NodeSpec(profile="h100", gpus=2, surfaces={"ib": {"enabled": False}})
    node = spec.resolve()
    ctx = StageContext(root=Path("/"))
    assert IbSurface().plan(node, ctx) == [] and IbSurface().services(node, ctx) == []
    assert len(node.gpus) == 2  # the GPU side of the node is untouched


def test_profiles_without_infiniband_have_no_hcas() -> None:
    assert plan("t4", gpus=1) == {}


def test_profile_values_reach_sysfs() -> None:
    entries = plan("a100", gpus=1)
    base = hca_dir(entries, "mlx5_0")
    assert text(entries, f"{base}/ports/1/rate") == "200 Gb/sec (4X HDR)\n"
    assert text(entries, f"{base}/hca_type") == "MT4123\n"
    assert text(entries, f"{base}/board_id") == "MT_0000000223\n"


def test_guids_and_lids_differ_between_nodes_and_are_stable() -> None:
    a1, a2, b = plan(node="alpha"), plan(node="alpha"), plan(node="beta")
    lid = lambda e: text(e, hca_dir(e, "mlx5_0") + "/ports/1/lid")  # noqa: E731
    guid = lambda e: text(e, hca_dir(e, "mlx5_0") + "/node_guid")  # noqa: E731
    assert lid(a1) == lid(a2) and guid(a1) == guid(a2)
    assert lid(a1) != lid(b) and guid(a1) != guid(b)


def test_services_run_the_responder_for_the_root(tmp_path: Path) -> None:
    from mokka_core.stage.native import native_dir

    node = NodeSpec(profile="h100", gpus=1).resolve()
    (service,) = IbSurface().services(node, StageContext(root=tmp_path))
    assert service.command == [str(native_dir() / "mokka-ib-responder"), "--node-file",
                               str(tmp_path / "var/lib/mokka/ib/node.conf"), "--socket",
                               str(tmp_path / "var/lib/mokka/ib/responder.sock")]
    assert (service.name, service.ready_path) == ("mokka-ib-responder", "var/lib/mokka/ib/responder.sock")


def test_services_without_a_built_responder_say_how_to_build_it(tmp_path: Path) -> None:
    from mokka_sim_ib.responder import ResponderNotBuilt

    node = NodeSpec(profile="h100", gpus=1).resolve()
    with pytest.raises(ResponderNotBuilt, match=r"make -C native install"):
        IbSurface().services(node, StageContext(root=tmp_path, native_dir=tmp_path))


def test_bad_node_desc_template_names_the_key() -> None:
    from mokka_core.errors import ConfigError
    from mokka_core.model.inputs import Inputs
    from mokka_core.model.resolve import resolve
    from mokka_core.schema.builtin import load_builtin

    profile = load_builtin("h100")
    assert profile.infiniband is not None
    template = profile.infiniband.model_copy(update={"node_desc_template": "{host}"})
    bad = profile.model_copy(update={"infiniband": template})
    node = resolve(Inputs(profile=bad, profile_source="h100.yaml", gpus=1))
    with pytest.raises(ConfigError, match=r"infiniband\.node_desc_template"):
        IbSurface().plan(node, StageContext(root=Path("/")))


def test_other_surfaces_do_not_change_when_ib_is_disabled_or_failed(tmp_path: Path) -> None:
    from mokka_core.errors import MokkaError
    from mokka_core.stage.native import native_dir
    from mokka_core.stage.surface import discover

    # pci is the exception by design: the HCAs' PCI functions go with the surface; and the NVML view
    # lists the node's NICs (pcifn.* records, for nvidia-smi topo -m), which go with it too
    others = {name: cls for name, cls in discover().items() if name not in ("ib", "pci")}

    def without_nics(plan: list) -> list:
        return [
            e._replace(content="".join(ln for ln in e.data().decode().splitlines(True) if not ln.startswith("pcifn.")))
            if isinstance(e, File) and e.path.endswith("mokka-nvml.state")
            else e
            for e in plan
            # and the kernel's modules: the HCAs' InfiniBand stack (and nvidia_peermem on it) go with the HCAs
            if not e.path.startswith(("proc/modules", "sys/module/"))
        ]

    ctx = StageContext(root=tmp_path, native_dir=native_dir())
    healthy = NodeSpec(profile="h100", gpus=2).resolve()
    compared = []
    for name, cls in others.items():
        try:
            baseline = without_nics(cls().plan(healthy, ctx))
        except MokkaError:  # e.g. the gpu surface without its built library
            continue
        for settings in ({"enabled": False}, {"state": "failed"}):
            changed = NodeSpec(profile="h100", gpus=2, surfaces={"ib": settings}).resolve()
            assert without_nics(cls().plan(changed, ctx)) == baseline, f"{name} changes with ib {settings}"
        compared.append(name)
    if not compared:
        pytest.skip("no other surface package (with its native parts) installed here")
