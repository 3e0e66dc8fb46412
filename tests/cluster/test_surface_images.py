"""Each surface's own image on the real node, as the seed's single-surface `docker run`: a pod of its own runs
`mokka-sim-<surface> serve`, which stages that surface and nothing of any other."""

from __future__ import annotations

import json
import subprocess

import pytest
from guide import apply
from node import KubeNode, wait_for
from node_images import recipe

SURFACES = ("gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib")
PROFILE = "gb200"  # a tray has every surface
SURFACE_USER = recipe.SURFACE_USER.split(":")[0]  # the user the single-surface images run as
NAMESPACE = "surfaces"
WALK = "import os\nfor d, ds, fs in os.walk('/node'):\n    for n in ds + fs: print(os.path.join(d, n)[5:])"


def planned(kube: KubeNode, surface: str) -> set[str]:
    """The files, links and device nodes `mokka-sim-<surface> plan` says staging creates, in its own pod (the node's
    NUMA layout follows the CPUs it sees); not what its services write later."""
    plan = exec_in(kube, surface, f"mokka-sim-{surface}", "plan", "-p", PROFILE).stdout.splitlines()
    return {line.split()[1] for line in plan if line.split() and line.split()[0] not in ("dir", "runtime")}


def pod(surface: str, image: str) -> dict[str, object]:
    """The surface's image serving into an emptyDir volume. The kubelet makes that 0777 and root's, a root the
    image's user may not trust (another user could change it): an init container hands it to that user first, as
    one prepares a volume for an image that runs as a user of its own."""
    prepare = {"name": "own-root", "image": image, "imagePullPolicy": "Never", "securityContext": {"runAsUser": 0},
               "command": ["sh", "-c", f"chown {SURFACE_USER} /node && chmod 0755 /node"],
               "volumeMounts": [{"name": "node", "mountPath": "/node"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"sim-{surface}", "namespace": NAMESPACE},
            "spec": {"restartPolicy": "Never", "initContainers": [prepare],
                     "containers": [{"name": "sim", "image": image, "imagePullPolicy": "Never",
                                     "args": ["serve", "--root", "/node", "-p", PROFILE],
                                     "volumeMounts": [{"name": "node", "mountPath": "/node"}]}],
                     "volumes": [{"name": "node", "emptyDir": {}}]}}


def exec_in(kube: KubeNode, surface: str, *command: str) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("-n", NAMESPACE, "exec", f"sim-{surface}", "--", *command, check=False)


def test_each_surface_image_stages_only_its_surface(kube: KubeNode, images: dict[str, str]) -> None:
    kube.kubectl("create", "namespace", NAMESPACE)
    try:
        for surface in SURFACES:
            apply(kube, pod(surface, images[f"mokka-sim-{surface}"]))
        for surface in SURFACES:
            try:
                wait_for(f"mokka-sim-{surface} serving", lambda s=surface: "serving under /node" in kube.kubectl(
                    "-n", NAMESPACE, "logs", f"sim-{s}", check=False).stdout, 120)
            except TimeoutError as exc:
                said = kube.kubectl("-n", NAMESPACE, "logs", f"sim-{surface}", check=False)
                raise TimeoutError(f"{exc}\n{said.stdout[-2000:]}{said.stderr[-500:]}") from exc
        plans = {surface: planned(kube, surface) for surface in SURFACES}
        for surface in SURFACES:
            check = exec_in(kube, surface, f"mokka-sim-{surface}", "check", "--root", "/node", "-p", PROFILE)
            if surface == "nvlink":  # its part is rows of the gpu surface's NVML state file: alone, it says so
                said = check.stdout + check.stderr
                assert check.returncode == 1 and "the gpu surface stages it" in said, said
            else:
                assert check.returncode == 0, f"{surface}: {check.stdout}{check.stderr[-1500:]}"
            staged = set(exec_in(kube, surface, "python3", "-c", WALK).stdout.split())
            others = set().union(*(plans[o] for o in SURFACES if o != surface)) - plans[surface]
            assert plans[surface] <= staged, f"{surface}: not staged {sorted(plans[surface] - staged)[:10]}"
            assert not staged & others, f"{surface}: staged another surface's {sorted(staged & others)[:10]}"
            phase = json.loads(kube.kubectl("-n", NAMESPACE, "get", "pod", f"sim-{surface}", "-o", "json").stdout)
            assert phase["status"]["phase"] == "Running"
    finally:
        kube.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s", check=False)


@pytest.fixture(autouse=True)
def _no_release_left(kube: KubeNode) -> None:
    """These pods run beside no mokka release: the surfaces stage into their own emptyDir roots."""
    assert not kube.json("get", "daemonsets", "-A")["items"]
