"""The images cannot be built here (no Docker engine), so test what they are made of and what they run:
the Dockerfiles (hadolint, structure), the entrypoint (shellcheck, behaviour) and, through the entrypoint,
the real CLIs with exactly the command line the chart renders."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import REPO, Helm, documents, find

DOCKER = REPO / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
SIMS = sorted(p.name.removeprefix("sim-") for p in (REPO / "packages").glob("sim-*") if p.is_dir())
BIN = Path(sys.executable).parent  # console scripts of the environment running the tests
HOST_CDI_MOUNT = "/host/cdi"  # where the node container has the host's CDI directory (templates/daemonset.yaml)
CONFIG_MOUNT = "/etc/mokka"  # where it has its projected ConfigMap volume (profile, surfaces, topology)
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|make|build-essential|libc6-dev|cmake)\b")


def tool(name: str) -> str:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r charts/requirements-test.txt)")
    return found


def stages(dockerfile: Path) -> list[list[str]]:
    """Instructions per build stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    result: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            result.append([])
        if result:
            result[-1].append(line)
    return result


# -- Dockerfiles --------------------------------------------------------------------------------------

def test_hadolint_is_clean() -> None:
    result = subprocess.run([tool("hadolint"), "--failure-threshold", "style", *map(str, DOCKERFILES)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_multi_stage_with_no_build_tools_in_the_final_stage(dockerfile: Path) -> None:
    built = stages(dockerfile)
    assert len(built) >= 3, "native build, wheels, runtime"
    final = built[-1]
    assert not any(BUILD_TOOLS.search(line) for line in final if not line.startswith("COPY")), final
    assert not any(line.startswith("RUN") and "apt-get install" in line for line in final)
    assert any("from=wheels" in line for line in final), "the runtime installs the wheels built earlier"
    assert any(line.startswith("ENTRYPOINT") and "mokka-entrypoint" in line for line in final)
    assert any(line.startswith("COPY") and "docker/entrypoint.sh" in line for line in final)
    assert any(BUILD_TOOLS.search(line) for stage in built[:-1] for line in stage), "the library is compiled"
    assert (DOCKER / f"{dockerfile.name}.dockerignore").exists()


def test_surface_images_run_as_non_root_and_node_image_says_why_it_is_root() -> None:
    sim_users = [line for line in stages(DOCKER / "sim.Dockerfile")[-1] if line.startswith("USER")]
    assert sim_users == ["USER 65532:65532"]
    node_text = (DOCKER / "node.Dockerfile").read_text()
    assert "USER 0:0" in node_text and "CAP_MKNOD" in node_text


def test_node_image_has_the_cluster_components() -> None:
    """The chart's allocation watcher and NRI plugin run from the node image: mokka-core's `cluster` extra
    (grpcio, protobuf) is built into the wheels, which the final stage installs whole."""
    wheels = [line for line in stages(DOCKER / "node.Dockerfile")[1] if line.startswith("RUN pip wheel")]
    assert len(wheels) == 1 and '"packages/mokka-core[cluster]"' in wheels[0], wheels
    assert any("/wheels/*.whl" in line for line in stages(DOCKER / "node.Dockerfile")[-1])


def test_bake_file_builds_the_node_and_every_sim_package() -> None:
    bake = json.loads((DOCKER / "docker-bake.json").read_text())
    targets = bake["target"]
    assert targets["node"]["dockerfile"] == "docker/node.Dockerfile"
    assert sorted(name.removeprefix("sim-") for name in targets if name != "node") == SIMS
    for sim in SIMS:
        target = targets[f"sim-{sim}"]
        assert target["dockerfile"] == "docker/sim.Dockerfile" and target["args"] == {"SIM": sim}
        assert target["tags"] == [f"localhost/mokka-sim-{sim}:${{TAG}}"]
    assert sorted(bake["group"]["default"]["targets"]) == sorted(targets)


def test_chart_default_image_is_the_node_image() -> None:
    values = yaml.safe_load((REPO / "charts" / "mokka" / "values.yaml").read_text())
    bake = json.loads((DOCKER / "docker-bake.json").read_text())
    node = values["images"]["node"]
    assert bake["target"]["node"]["tags"][0].split(":")[0] == f"{node['registry']}/{node['repository']}"
    chart = yaml.safe_load((REPO / "charts" / "mokka" / "Chart.yaml").read_text())
    assert bake["variable"]["TAG"]["default"] == chart["appVersion"]


def test_chart_app_version_is_the_node_image_tag() -> None:
    """`make images` tags the node image with mokka-core's version; the chart's default tag is appVersion."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("images_recipe", REPO / "tools" / "images.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = recipe  # its dataclasses look their module up there
    spec.loader.exec_module(recipe)
    (node,) = [image for image in recipe.images() if image.name == "mokka-node"]
    chart = yaml.safe_load((REPO / "charts" / "mokka" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "mokka" / "values.yaml").read_text())["images"]["node"]
    assert node.version == chart["appVersion"] and values["tag"] == ""
    assert node.reference == f"{values['registry']}/{values['repository']}:{chart['appVersion']}"
    assert sorted(image.name for image in recipe.images()) == sorted(
        ["mokka-node", *(f"mokka-sim-{sim}" for sim in SIMS)])


# -- entrypoint ---------------------------------------------------------------------------------------

def test_shellcheck_is_clean() -> None:
    result = subprocess.run([tool("shellcheck"), "--shell=sh", str(ENTRYPOINT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def fake_programs(tmp_path: Path, *names: str) -> dict[str, str]:
    """Programs that print their name and arguments, one per line."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in names:
        script = bindir / name
        script.write_text(f'#!/bin/sh\necho {name}\nfor a in "$@"; do echo "$a"; done\n')
        script.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin"}


def entry(env: dict[str, str], main: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**env, **({"MOKKA_MAIN": main} if main is not None else {})}
    env.pop("MOKKA_MAIN", None) if main is None else None
    return subprocess.run(["/bin/sh", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True)


def test_entrypoint_runs_the_main_program_with_the_arguments(tmp_path: Path) -> None:
    env = fake_programs(tmp_path, "mokka", "mokka-sim-pci")
    result = entry(env, "mokka node", "up", "--profile", "h100", "--node-name", "n 1")
    assert result.stdout.splitlines() == ["mokka", "node", "up", "--profile", "h100", "--node-name", "n 1"]
    result = entry(env, "mokka-sim-pci", "stage", "--root", "/node")
    assert result.stdout.splitlines() == ["mokka-sim-pci", "stage", "--root", "/node"]


def test_entrypoint_options_alone_go_to_the_main_program(tmp_path: Path) -> None:
    env = fake_programs(tmp_path, "mokka-sim-pci")
    assert entry(env, "mokka-sim-pci", "--help").stdout.splitlines() == ["mokka-sim-pci", "--help"]
    assert entry(env, "mokka-sim-pci").stdout.splitlines() == ["mokka-sim-pci", "--help"]


def test_entrypoint_runs_a_program_named_first(tmp_path: Path) -> None:
    env = fake_programs(tmp_path, "mokka", "nvml-mock-ctl")
    result = entry(env, "mokka node", "nvml-mock-ctl", "fail", "0", "lost")
    assert result.stdout.splitlines() == ["nvml-mock-ctl", "fail", "0", "lost"]
    result = entry(env, "mokka node", "/bin/echo", "plain")
    assert result.stdout == "plain\n"


def test_entrypoint_without_main_program_says_so(tmp_path: Path) -> None:
    result = entry(fake_programs(tmp_path), None, "up")
    assert result.returncode == 2 and "MOKKA_MAIN is not set" in result.stderr


def test_entrypoint_passes_the_exit_status_on(tmp_path: Path) -> None:
    env = fake_programs(tmp_path)
    assert entry(env, "mokka node", "sh", "-c", "exit 7").returncode == 7


# -- what the images run: the real CLIs through the entrypoint -----------------------------------------

def require_all_surfaces() -> None:
    """The node image installs every sim package; without them `mokka node up` stages nothing worth testing."""
    from importlib.metadata import entry_points

    installed = {ep.name for ep in entry_points(group="mokka.surfaces")}
    missing = sorted(set(SIMS) - installed)
    if missing:
        pytest.skip(f"surface packages not installed here: {', '.join(missing)} (the node image has them all)")


def real_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def require_cli(name: str) -> None:
    if not (BIN / name).exists() and shutil.which(name) is None:
        pytest.skip(f"{name} is not installed in this environment (the image installs every package)")


@pytest.mark.parametrize("sim", SIMS)
def test_each_surface_image_command_stages_and_tears_down(tmp_path: Path, sim: str) -> None:
    """`docker run mokka-sim-<sim> stage --root /node -p h100` and `teardown`, as the image runs them."""
    require_cli(f"mokka-sim-{sim}")
    env, root = real_env(), tmp_path / "node"
    staged = entry(env, f"mokka-sim-{sim}", "stage", "--root", str(root), "-p", "h100", "--node-name", "n1")
    assert staged.returncode == 0, staged.stderr
    assert f"{sim}: staged" in staged.stdout
    removed = entry(env, f"mokka-sim-{sim}", "teardown", "--root", str(root))
    assert removed.returncode == 0, removed.stderr
    leftovers = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    assert leftovers == [], f"{sim} left {leftovers[:5]}"


def test_node_image_tools_answer_help() -> None:
    for program, args in (("mokka", ["node", "--help"]), ("nvml-mock-ctl", ["--help"]),
                          ("mokka-allocwatch", ["--help"]), ("mokka-nri", ["--help"])):
        require_cli(program)
        result = entry(real_env(), "mokka node", program, *args)
        assert result.returncode == 0, result.stderr


def config_files(docs: list[dict[str, Any]]) -> dict[str, str]:
    """What the node container's projected volume at /etc/mokka holds, as rendered: {path: text}."""
    volumes = find(docs, "DaemonSet", "mokka-test")["spec"]["template"]["spec"]["volumes"]
    (config,) = [v for v in volumes if v["name"] == "config"]
    files = {}
    for source in config["projected"]["sources"]:
        data = find(docs, "ConfigMap", source["configMap"]["name"])["data"]
        files.update({item["path"]: data[item["key"]] for item in source["configMap"]["items"]})
    return files


def write_config(helm: Helm, root: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Render ``values`` for the scratch ``root`` and lay the pod's /etc/mokka out beside it as the kubelet does,
    or update it in place as the kubelet does for a running pod (a ``..data`` link swapped); the documents."""
    from mokka_core.testing.configmap import write_configmap_volume

    docs = documents(helm.render({**values, "node": {"root": str(root)}}))
    write_configmap_volume(root.parent / "etc-mokka", config_files(docs))
    return docs


def chart_command(helm: Helm, root: Path, values: dict[str, Any]) -> dict[str, Any]:
    """The node container's command, probe and preStop as rendered, moved onto a scratch root, with its
    /etc/mokka at ``<root>/../etc-mokka`` and its /host/cdi at ``<root>/../host-cdi``."""
    docs = write_config(helm, root, values)
    (node,) = [c for c in find(docs, "DaemonSet", "mokka-test")["spec"]["template"]["spec"]["containers"]
               if c["name"] == "node"]
    host_cdi = root.parent / "host-cdi"  # the pod's /host/cdi: the host's CDI directory
    host_cdi.mkdir(parents=True, exist_ok=True)
    moved = {CONFIG_MOUNT: str(root.parent / "etc-mokka"), HOST_CDI_MOUNT: str(host_cdi)}

    def local_path(arg: str) -> str:
        for mount, scratch in moved.items():
            if arg == mount or arg.startswith(f"{mount}/"):
                return scratch + arg[len(mount):]
        return arg.replace("$(NODE_NAME)", "node-1")

    def local(argv: list[str]) -> list[str]:
        return [local_path(a) for a in argv]

    return {"up": local(node["command"][2:] + node["args"]),  # the entrypoint supplies `mokka node`
            "ready": local(node["readinessProbe"]["exec"]["command"]),
            "preStop": local(node["lifecycle"]["preStop"]["exec"]["command"])}


def pod_env(helm: Helm, root: Path) -> dict[str, str]:
    """The container's plain env values (what `kubectl exec POD -- CMD` runs with)."""
    docs = documents(helm.render({"node": {"root": str(root)}}))
    (node,) = find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in node["env"] if "value" in e}


def run_node(helm: Helm, tmp_path: Path, values: dict[str, Any],
             while_ready: Callable[[Path], None] | None = None) -> tuple[Path, dict[str, Any]]:
    require_cli("mokka")
    require_all_surfaces()
    root = tmp_path / "root"
    cmd = chart_command(helm, root, values)
    env = real_env()
    log = (tmp_path / "node.log").open("w")
    daemon = subprocess.Popen(["/bin/sh", str(ENTRYPOINT), *cmd["up"]], env={**env, "MOKKA_MAIN": "mokka node"},
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(cmd["ready"], env=env, capture_output=True).returncode != 0:
            assert daemon.poll() is None, (tmp_path / "node.log").read_text()
            assert time.monotonic() < deadline, "not ready within 30 s:\n" + (tmp_path / "node.log").read_text()
            time.sleep(0.2)
        status = json.loads(subprocess.run([cmd["ready"][0], "node", "status", "--root", str(root), "--json"],
                                           env=env, capture_output=True, text=True, check=True).stdout)
        if while_ready is not None:
            while_ready(root)
        down = subprocess.run(cmd["preStop"], env=env, capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        log.close()
    return root, status


NODE_CASES = {
    "t4-pci-failed": ({"gpu": {"profile": "t4", "count": 1},
                       "surfaces": {"pci": {"state": "failed"}, "ib": {"enabled": False}}},
                      {"pci": ("failed", True), "ib": ("healthy", False), "gpu": ("healthy", True)}),
    "gb200-topology": ({"gpu": {"profile": "gb200", "count": 2},
                        "topology": {"domains": [{"uuid": "8c4f3b1e-5d2a-4e6f-9a7b-0c1d2e3f4a5b",
                                                  "cliques": [{"id": 3, "nodes": ["node-1"]}]}]}},
                       {"imex": ("healthy", True), "fabricmanager": ("healthy", True), "ib": ("healthy", True)}),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_node_image_runs_the_chart_command_line(helm: Helm, tmp_path: Path, case: str) -> None:
    """The DaemonSet's exact command line, readiness probe and preStop against the real `mokka node`."""
    values, expected = NODE_CASES[case]
    root, status = run_node(helm, tmp_path, values)
    assert status["ready"] is True
    assert status["node"]["name"] == "node-1" and status["node"]["gpus"] == values["gpu"]["count"]
    for surface, (state, enabled) in expected.items():
        got = status["surfaces"][surface]
        assert (got["state"], got["enabled"], got["staged"]) == (state, enabled, enabled), (surface, got)
    leftovers = [str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()]
    assert leftovers == [], f"preStop left {leftovers[:10]}"


def test_cdi_spec_reaches_the_hosts_cdi_directory_through_the_chart_mounts(helm: Helm, tmp_path: Path) -> None:
    """The chart's layout: the host's CDI directory mounted apart from the root gets a link to the staged spec;
    preStop removes it, and nothing of it is left in the root (no mount point either)."""
    def during(root: Path) -> None:
        link = root.parent / "host-cdi" / "nvidia.yaml"
        assert os.readlink(link) == f"{root}/var/run/cdi/nvidia.yaml"
        spec = yaml.safe_load(link.read_text())
        assert spec["kind"] == "nvidia.com/gpu"
        host_paths = [n["hostPath"] for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
        assert host_paths and all(p.startswith(f"{root}/dev/") for p in host_paths)

    root, status = run_node(helm, tmp_path, {"gpu": {"profile": "t4"}}, while_ready=during)
    assert status["ready"] is True
    assert list((tmp_path / "host-cdi").iterdir()) == [], "preStop must remove the link from the host's CDI directory"
    assert list(root.rglob("*")) == []


def pci_configs(root: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted((root / "sys/bus/pci/devices").glob("*/config"))]


def node_status(root: Path) -> dict[str, Any]:
    done = subprocess.run([str(BIN / "mokka"), "node", "status", "--root", str(root), "--json"], env=real_env(),
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.25)


def test_a_surface_change_by_helm_upgrade_is_rendered_by_the_running_node(helm: Helm, tmp_path: Path) -> None:
    """`helm upgrade --set surfaces.pci.state=failed ...`: the pod template stays the same (no restart), the
    kubelet swaps the projected surfaces.yaml, and the running node re-renders in place: the same daemon, PCI
    config space reads 0xff, the fabric manager's service goes with its surface; and back."""
    healthy = {"gpu": {"profile": "h100", "count": 1}}
    broken = {**healthy, "surfaces": {"pci": {"state": "failed"}, "fabricmanager": {"enabled": False}}}

    def during(root: Path) -> None:
        first = node_status(root)
        assert first["surfaces"]["fabricmanager"]["services"] == {"nv-fabricmanager": "RUNNING"}, first
        assert pci_configs(root) and not any(set(config) == {0xFF} for config in pci_configs(root))

        docs = write_config(helm, root, broken)
        assert find(docs, "DaemonSet", "mokka-test")["spec"]["template"] == template  # nothing restarts the pod
        wait_until(lambda: all(set(config) == {0xFF} for config in pci_configs(root)), "pci restaged failed")
        wait_until(lambda: not node_status(root)["surfaces"]["fabricmanager"]["staged"], "fabricmanager removed")
        now = node_status(root)
        assert now["surfaces"]["pci"]["state"] == "failed" and now["surfaces"]["fabricmanager"]["services"] == {}
        assert now["daemon"]["pid"] == first["daemon"]["pid"] and now["ready"] is True, now

        write_config(helm, root, healthy)
        wait_until(lambda: node_status(root)["surfaces"]["fabricmanager"]["services"] == {
            "nv-fabricmanager": "RUNNING"}, "fabricmanager's service back")
        wait_until(lambda: not any(set(config) == {0xFF} for config in pci_configs(root)), "pci healthy again")
        assert node_status(root)["daemon"]["pid"] == first["daemon"]["pid"]

    template = find(documents(helm.render({**healthy, "node": {"root": str(tmp_path / "root")}})), "DaemonSet",
                    "mokka-test")["spec"]["template"]
    root, status = run_node(helm, tmp_path, healthy, while_ready=during)
    assert status["ready"] is True
    assert list(root.rglob("*")) == []


READ_ONLY_ROOT = """
set -eu
mount --bind "$SCRATCH" "$SCRATCH"
mount -t tmpfs tmpfs /run
mkdir /run/mokka
mount -t tmpfs tmpfs /run/mokka
mount -o remount,ro /run
mount -o remount,bind,ro /
if touch /mokka-rofs-probe 2>/dev/null; then echo "/ is still writable" >&2; exit 1; fi
export TMPDIR="$SCRATCH/tmp"
MOKKA_MAIN="mokka node" setpriv --bounding-set "$CAPS" -- /bin/sh "$ENTRYPOINT" {up} > "$LOG" 2>&1 &
daemon=$!
tries=0
until {ready} >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 150 ] || ! kill -0 "$daemon" 2>/dev/null; then echo "never ready" >&2; cat "$LOG" >&2; exit 1; fi
    sleep 0.2
done
sleep 2
mokka node status --root "$ROOT" --json > "$SCRATCH/status.json"
{pre_stop}
wait "$daemon" || true
"""


def test_node_runs_with_the_charts_security_context(helm: Helm, tmp_path: Path) -> None:
    """The chart's securityContext: read-only root filesystem (only the root, /tmp and /run/mokka writable) and
    only the capabilities it adds. gb200 runs every surface and long-lived service (imex, fabric manager, ib)."""
    import shlex

    require_cli("mokka")
    require_all_surfaces()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private mount namespace")
    docs = documents(helm.render())
    mounts = [m["mountPath"] for m in find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
              ["volumeMounts"]]
    assert "/tmp" in mounts and "/run/mokka" in mounts
    security = find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"]["drop"] == ["ALL"]
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop capabilities")
    caps = "-all," + ",".join(f"+{cap.lower()}" for cap in security["capabilities"]["add"])
    root = tmp_path / "root"
    (tmp_path / "tmp").mkdir()
    cmd = chart_command(helm, root, {"gpu": {"profile": "gb200"}})
    script = READ_ONLY_ROOT.format(up=shlex.join(cmd["up"]), ready=shlex.join(cmd["ready"]),
                                   pre_stop=shlex.join(cmd["preStop"]))
    env = {**real_env(), "ROOT": str(root), "SCRATCH": str(tmp_path), "ENTRYPOINT": str(ENTRYPOINT),
           "LOG": str(tmp_path / "node.log"), "CAPS": caps}
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["ready"] is True, status
    services = {name: state for s in status["surfaces"].values() for name, state in s["services"].items()}
    assert services and all(state == "RUNNING" for state in services.values()), (
        f"{services}\n{(tmp_path / 'node.log').read_text()[-3000:]}")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def without_capabilities(argv: list[str]) -> list[str]:
    """The chart drops every capability of both cluster components; do the same where setpriv allows it."""
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return ["setpriv", "--bounding-set", "-all", "--", *argv]
    return argv


def exercise_cluster_components(helm: Helm, values: dict[str, Any], root: Path, sockets: Path, port: int,
                                scratch: Path) -> dict[str, Any]:
    """Run the allocation-watcher sidecar and the NRI plugin with exactly their rendered command lines against
    the running node, a kubelet and a runtime that speak the real protocols."""
    from mokka_core.cluster.nri.runtime import FakeRuntime, container, pod
    from mokka_core.cluster.testing import FakeKubelet

    docs = documents(helm.render({**values, "node": {"root": str(root)}}))
    (watcher,) = [c for c in find(docs, "DaemonSet", "mokka-test")["spec"]["template"]["spec"]["containers"]
                  if c["name"] == "allocation-watcher"]
    (plugin,) = find(docs, "DaemonSet", "mokka-test-nri")["spec"]["template"]["spec"]["containers"]
    env, seen = real_env(), {}
    with FakeKubelet(sockets / "kubelet" / "kubelet.sock") as kubelet:
        kubelet.allocate("team-a", "train", "main", "0")
        polled = subprocess.run(without_capabilities([*watcher["command"], *watcher["args"], "--once"]),
                                env=env, capture_output=True, text=True, timeout=60)
    assert polled.returncode == 0, polled.stdout + polled.stderr
    (state_file,) = root.glob("usr/lib/*/mokka-nvml.state")
    deadline = time.monotonic() + 15  # the node daemon re-renders when the override file changes
    while "team-a/train/main" not in state_file.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the allocation never reached the NVML state file"
        time.sleep(0.1)
    seen["allocated"] = True
    with FakeRuntime(sockets / "nri" / "nri.sock") as runtime, (scratch / "nri.log").open("w") as log:
        nri = subprocess.Popen(without_capabilities([*plugin["command"], *plugin["args"]]), env=env,
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            probe = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while http_status(probe + plugin["readinessProbe"]["httpGet"]["path"]) != 200:
                assert nri.poll() is None and time.monotonic() < deadline, (scratch / "nri.log").read_text()
                time.sleep(0.1)
            seen["live"] = http_status(probe + plugin["livenessProbe"]["httpGet"]["path"])
            seen["opted-in"] = runtime.create_container(pod("team-a", "train"), container("main")).adjust
            seen["release"] = runtime.create_container(pod("mokka", "node"), container("main")).adjust
        finally:
            nri.terminate()
            nri.wait(timeout=30)
    return seen


def break_gpu_from_inside(helm: Helm, root: Path) -> dict[str, Any]:
    env = {**real_env(), **pod_env(helm, root)}
    assert env["MOKKA_ROOT"] == str(root)
    failed = subprocess.run(["nvml-mock-ctl", "fail", "0", "lost"], env=env, capture_output=True, text=True)
    assert failed.returncode == 0, failed.stderr
    report = subprocess.run(["nvml-mock-ctl", "status", "--json"], env=env, capture_output=True, text=True)
    return {**json.loads(report.stdout), "override_file": (root / "var/lib/mokka/overrides.yaml").is_file()}


@pytest.fixture(scope="module")
def inside_the_pod(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One t4 node run (node start-up dominates) serving the tests of what runs beside the node daemon: the
    cluster components first, then a runtime fault through nvml-mock-ctl."""
    import tempfile

    for program in ("nvml-mock-ctl", "mokka-allocwatch", "mokka-nri"):
        require_cli(program)
    scratch = tmp_path_factory.mktemp("pod")
    sockets = Path(tempfile.mkdtemp(prefix="mokka-", dir="/tmp"))  # unix socket paths: at most 107 bytes
    port = free_port()
    values = {"gpu": {"profile": "t4", "count": 1},
              "allocationWatcher": {"enabled": True, "podResourcesDir": str(sockets / "kubelet")},
              "nri": {"enabled": True, "socketDir": str(sockets / "nri"), "healthPort": port,
                      "namespaces": ["team-a"]}}
    seen: dict[str, Any] = {}

    def exercise(root: Path) -> None:
        seen["root"] = root
        seen["cluster"] = exercise_cluster_components(helm, values, root, sockets, port, scratch)
        seen["fault"] = break_gpu_from_inside(helm, root)

    try:
        run_node(helm, scratch, values, while_ready=exercise)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    return seen


def test_runtime_faults_from_inside_the_pod(inside_the_pod: dict[str, Any]) -> None:
    """NOTES.txt's `kubectl exec POD -- nvml-mock-ctl fail 0 lost`: with the pod's env, no --root needed."""
    seen = inside_the_pod["fault"]
    assert seen["override_file"], "the override file lives at <root>/var/lib/mokka/overrides.yaml"
    assert [gpu["health"] for gpu in seen["gpus"]] == ["lost"]
    notes = (REPO / "charts" / "mokka" / "templates" / "NOTES.txt").read_text()
    assert "nvml-mock-ctl fail 0 lost" in notes


def test_cluster_components_run_the_chart_command_lines(inside_the_pod: dict[str, Any]) -> None:
    """The allocation-watcher sidecar and the NRI plugin with exactly the rendered command lines (host socket
    directories moved to scratch, no capabilities) beside the real node daemon: a kubelet allocation reaches
    the NVML state file; the plugin registers with the runtime, turns ready and live on the probes' paths,
    injects the staged root into an opted-in pod and leaves the release's namespace alone."""
    seen = inside_the_pod["cluster"]
    assert seen["allocated"] and seen["live"] == 200
    injected = seen["opted-in"]
    assert [(m.source, m.destination) for m in injected.mounts] == [(str(inside_the_pod["root"]), "/opt/mokka")]
    assert "/dev/nvidia0" in [d.path for d in injected.linux.devices]
    assert not seen["release"].mounts, "the release's own namespace is excluded"
