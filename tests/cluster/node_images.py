"""Container images for the node's containerd, none pulled from any registry.

- The sandbox's pause image: the static pause program as a one-layer OCI archive written here.
- Mokka's images: ``make images`` as the guide says, into a private containers storage (buildah).
- The device plugin's and node-feature-discovery's images: the pinned releases' programs on Mokka's Debian base
  image (buildah).

Each goes to containerd with ``ctr images import`` (a docker archive saved with podman for the buildah ones).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from binaries import Binaries
from node import PAUSE_IMAGE, KubeNode

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import images as recipe  # noqa: E402  (tools/images.py: what make images builds)

DEVICE_PLUGIN_IMAGE = "localhost/nvidia-device-plugin"
NFD_IMAGE = "localhost/node-feature-discovery"


def _blob(layout: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def pause_archive(pause: Path, into: Path) -> Path:
    """An OCI image archive whose one layer is ``/pause`` (the entrypoint), named PAUSE_IMAGE."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = pause.stat().st_size, 0o755
        with open(pause, "rb") as program:
            layer.addfile(info, program)
    diff = raw.getvalue()
    compressed = gzip.compress(diff, mtime=0)
    archive = into / "pause.oci.tar"
    with tarfile.open(archive, "w") as layout:
        layer_desc = _blob(layout, compressed, "application/vnd.oci.image.layer.v1.tar+gzip")
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(diff).hexdigest()}"]}})
        config_desc = _blob(layout, config.encode(), "application/vnd.oci.image.config.v1+json")
        manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": config_desc, "layers": [layer_desc]})
        manifest_desc = _blob(layout, manifest.encode(), "application/vnd.oci.image.manifest.v1+json")
        manifest_desc["annotations"] = {"io.containerd.image.name": PAUSE_IMAGE,
                                        "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(":", 1)[1]}
        for name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
                           ("index.json", json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return archive


def storage_env(directory: Path) -> dict[str, str]:
    """A private containers storage for buildah and podman (overlay), so nothing lands in the host's: the
    environment that names it (tools/images.py's build steps take it from this process's environment)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{directory / "graph"}"\nrunroot = "{directory / "run"}"\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf")}


def make_images(python: str, env: dict[str, str]) -> list[str]:
    """``make images`` (the guide's first step) with ``PY=python``; the references it built."""
    done = subprocess.run(["make", "-C", str(REPO), "images", f"PY={python}"], env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"make images failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    return [image.reference for image in recipe.images()]


def device_plugin_image(binaries: Binaries, version: str) -> str:
    """The pinned device plugin release's programs (plugin, GFD) on Mokka's Debian base, as its image ships them:
    on PATH, with the release image's NVIDIA_* variables, and no NVML (the plugin finds the driver's under the driver
    root it is given; GFD gets it from the runtime)."""
    reference = f"{DEVICE_PLUGIN_IMAGE}:{version}"
    with recipe.container(recipe.base_image()) as working:
        for name, program in (("nvidia-device-plugin", binaries.device_plugin),
                              ("gpu-feature-discovery", binaries.gpu_feature_discovery)):
            recipe.run("buildah", "copy", "--quiet", "--chmod", "0755", working, str(program), f"/usr/bin/{name}",
                       quiet=True)
        # as the release's image: the NVIDIA container runtime (here Mokka's NRI plugin, which honours the same
        # variable) gives GPU feature discovery, which mounts no driver root, the driver and every GPU
        recipe.run("buildah", "config", "--entrypoint", "[]", "--cmd", "nvidia-device-plugin",
                   "--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", "NVIDIA_DRIVER_CAPABILITIES=utility", working)
        recipe.commit(working, reference)
    return reference


def nfd_image(binaries: Binaries, version: str) -> str:
    """The pinned node-feature-discovery release's programs on Mokka's Debian base, as its image ships them (the
    chart runs nfd-master, nfd-worker and nfd-gc by name)."""
    reference = f"{NFD_IMAGE}:{version}"
    with recipe.container(recipe.base_image()) as working:
        for name, program in (("nfd-master", binaries.nfd_master), ("nfd-worker", binaries.nfd_worker),
                              ("nfd-gc", binaries.nfd_gc)):
            recipe.run("buildah", "copy", "--quiet", "--chmod", "0755", working, str(program), f"/usr/bin/{name}",
                       quiet=True)
        # the release's image runs as nobody, and the chart's pods insist (runAsNonRoot)
        recipe.run("buildah", "config", "--entrypoint", "[]", "--cmd", "nfd-worker", "--user", "65534:65534",
                   working)
        recipe.commit(working, reference)
    return reference


def import_images(node: KubeNode, references: list[str], env: dict[str, str], scratch: Path) -> None:
    """Each buildah image into the node's containerd (podman save as a docker archive, then ctr import)."""
    for reference in references:
        archive = scratch / (reference.replace("/", "_").replace(":", "_") + ".tar")
        save = ["podman", "save", "--quiet", "--format", "docker-archive", "-o", str(archive), reference]
        done = subprocess.run(save, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"podman save {reference} failed: {done.stderr.strip()[-500:]}")
        node.ctr("images", "import", str(archive))
        archive.unlink()
