"""Build the eight container images with buildah, publish them and the chart to an OCI registry.

    python tools/images.py build                 # make images
    python tools/images.py publish HOST:PORT     # make publish REGISTRY=HOST:PORT

Nothing is pulled from a container registry.  Layers, bottom to top:
  1. base       Debian bookworm from Debian's packages (mmdebstrap, minbase, python3, the user
                mokka 65532); the tarball is cached under the consumer cache, keyed by its recipe.
  2. runtime    mokka-core and its dependencies (wheels built from the checkout, the mock
                libnvidia-ml inside mokka-core's wheel) and the entrypoint; shared by all eight.
  3. the image  mokka-node: every sim package, the `cluster` extra and Debian's nvidia-smi;
                mokka-sim-<surface>: that sim package (sim-gpu with nvidia-smi too).
Images are named localhost/<name>:<version of the package the image runs> in the containers storage
(buildah's default, or what CONTAINERS_STORAGE_CONF names).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
CHART = REPO / "charts" / "mokka"
SIMS = sorted(p.name.removeprefix("sim-") for p in (REPO / "packages").glob("sim-*") if p.is_dir())
NVIDIA_SMI_BRANCHES = ("535", "550", "555")
IMAGE_CACHE = "/var/cache/mokka"  # $MOKKA_CACHE of the images: Debian's nvidia-smi per branch
SURFACE_USER = "65532:65532"
LICENSE = "Apache-2.0"

SUITE = "bookworm"
# The base root filesystem's recipe: every argument of mmdebstrap but the mirror and the output.
MMDEBSTRAP = [
    "--variant=minbase", "--include=python3",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",  # merged /usr without usrmerge (and its perl)
    "--aptopt=Acquire::Languages \"none\"",
    *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "doc", "info", "locale")),
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--customize-hook=chroot \"$1\" useradd --uid 65532 --user-group --no-create-home "
    "--home-dir /nonexistent --shell /usr/sbin/nologin mokka",
    "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/* \"$1\"/var/log/*",
]  # fmt: skip


class BuildError(Exception):
    pass


@dataclass(frozen=True)
class Image:
    name: str  # mokka-node, mokka-sim-pci, ...
    package: str  # the package directory whose version tags the image
    installs: tuple[str, ...]  # requirements installed on top of the runtime layer
    main: str  # $MOKKA_MAIN: the program the entrypoint runs
    command: str  # the default argument
    user: str
    nvidia_smi: bool
    env: tuple[tuple[str, str], ...] = ()

    @property
    def version(self) -> str:
        return package_version(self.package)

    @property
    def reference(self) -> str:
        return f"localhost/{self.name}:{self.version}"


def images() -> list[Image]:
    node = Image("mokka-node", "mokka-core", ("mokka-core[cluster]", *(f"mokka-sim-{s}" for s in SIMS)),
                 "mokka node", "up", "0:0", True, (("MOKKA_ROOT", "/var/lib/mokka/root"),))
    return [node, *(Image(f"mokka-sim-{s}", f"sim-{s}", (f"mokka-sim-{s}",), f"mokka-sim-{s}", "--help",
                          SURFACE_USER, s == "gpu") for s in SIMS)]


def package_version(package: str) -> str:
    (version_file,) = (REPO / "packages" / package / "src").glob("*/version.py")
    found = re.search(r'^__version__ = "([^"]+)"', version_file.read_text(), re.M)
    if found is None:
        raise BuildError(f"{version_file}: no __version__ = \"...\" line")
    return found.group(1)


def run(*argv: str, capture: bool = False, quiet: bool = False, env: dict[str, str] | None = None) -> str:
    """Run a build step; its output on ours unless ``capture`` (returned) or ``quiet`` (dropped)."""
    output = subprocess.PIPE if capture else subprocess.DEVNULL if quiet else None
    result = subprocess.run(argv, text=True, stdout=output, env=env)
    if result.returncode != 0:
        raise BuildError(f"`{' '.join(argv[:4])} ...` exited {result.returncode}")
    return str(result.stdout or "").strip()


def cache_root() -> Path:
    configured = os.environ.get("MOKKA_CONSUMER_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "mokka" / "consumers"


def debian_mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


# -- layer 1: the base root filesystem --------------------------------------------------------------------

def base_rootfs() -> tuple[Path, str]:
    """The cached base tarball and its key (the recipe's hash); built once with mmdebstrap."""
    if shutil.which("mmdebstrap") is None:
        raise BuildError("mmdebstrap is not installed (as root: apt-get install mmdebstrap)")
    mirror = debian_mirror()
    key = hashlib.sha256("\n".join([SUITE, mirror, *MMDEBSTRAP]).encode()).hexdigest()[:16]
    tarball = cache_root() / "images" / f"rootfs-{SUITE}-{key}.tar"
    if not tarball.is_file():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_name(f".{tarball.name}")  # mmdebstrap writes a tar for a name ending .tar
        print(f"images: base root filesystem: mmdebstrap {SUITE} from {mirror}", flush=True)
        # a fixed clock: the same recipe gives the same files and times
        env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "1700000000")}
        run("mmdebstrap", "--quiet", *MMDEBSTRAP, SUITE, str(partial), mirror, env=env)
        partial.replace(tarball)
    return tarball, key


def image_exists(reference: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", reference],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


@contextmanager
def container(source: str) -> Iterator[str]:
    """A buildah working container from ``source``, removed whatever happens."""
    name = run("buildah", "from", "--quiet", "--pull=never", source, capture=True)
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def commit(working: str, reference: str) -> None:
    run("buildah", "commit", "--quiet", "--format", "oci", "--timestamp", epoch(), working, reference,
        quiet=True)


def epoch() -> str:
    return os.environ.get("SOURCE_DATE_EPOCH") or run("git", "-C", str(REPO), "log", "-1", "--format=%ct",
                                                      capture=True)


def base_image() -> str:
    tarball, key = base_rootfs()
    reference = f"localhost/mokka-base:{SUITE}-{key}"
    if not image_exists(reference):
        with container("scratch") as working:
            run("buildah", "add", "--quiet", working, str(tarball), "/", quiet=True)
            run("buildah", "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8", working)
            commit(working, reference)
    return reference


# -- wheels and what the images install ----------------------------------------------------------------

def build_wheels(python: str, into: Path) -> None:
    """Wheels of every package in the checkout and of their dependencies, plus pip (the installer runs
    from its wheel on a bind mount: no pip in the images)."""
    if not any((REPO / "packages/mokka-core/src/mokka_core/_native").glob("libnvidia-ml.so*")):
        raise BuildError("the mock libnvidia-ml is not built (make native)")
    packages = [f"{REPO / 'packages' / 'mokka-core'}[cluster]", *(str(REPO / "packages" / f"sim-{s}") for s in SIMS)]
    run(python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(into), "pip", *packages)


def fetch_nvidia_smi(python: str) -> Path:
    """Mokka's nvidia-smi cache with every branch (``mokka fetch nvidia-smi``: Debian's binary, unpacked)."""
    run(python, "-m", "mokka_core", "fetch", "nvidia-smi", *NVIDIA_SMI_BRANCHES, quiet=True)
    return Path(run(python, "-c", "from mokka_core.stage.nvidia_smi import cache_dir; print(cache_dir())",
                    capture=True))


def pip_install(working: str, wheels: Path, *requirements: str) -> None:
    (pip_wheel,) = wheels.glob("pip-*.whl")
    run("buildah", "run", "--network", "none", "--volume", f"{wheels}:/wheels:ro", working, "--",
        "python3", f"/wheels/{pip_wheel.name}/pip", "install", "--quiet", "--no-index", "--find-links", "/wheels",
        "--no-cache-dir", "--break-system-packages", "--root-user-action=ignore", "--disable-pip-version-check",
        *requirements)


def runtime_image(base: str, wheels: Path) -> str:
    reference = f"localhost/mokka-runtime:{package_version('mokka-core')}"
    with container(base) as working:
        pip_install(working, wheels, "mokka-core")
        run("buildah", "copy", "--quiet", "--chmod", "0755", working, str(ENTRYPOINT),
            "/usr/local/bin/mokka-entrypoint", quiet=True)
        commit(working, reference)
    return reference


def labels(image: Image) -> dict[str, str]:
    found = {
        "org.opencontainers.image.title": image.name,
        "org.opencontainers.image.version": image.version,
        "org.opencontainers.image.licenses": LICENSE,
        "org.opencontainers.image.revision": run("git", "-C", str(REPO), "rev-parse", "HEAD", capture=True),
    }
    source = os.environ.get("SOURCE_URL") or subprocess.run(
        ["git", "-C", str(REPO), "remote", "get-url", "origin"], capture_output=True, text=True).stdout.strip()
    if "://" in source or source.startswith("git@"):  # a clone of a local path names this machine, not a source
        found["org.opencontainers.image.source"] = source
    else:
        print("images: no SOURCE_URL and no URL for git remote `origin`: no org.opencontainers.image.source label",
              file=sys.stderr)
    return found


def build_image(image: Image, runtime: str, wheels: Path, nvidia_smi: Path | None) -> None:
    with container(runtime) as working:
        pip_install(working, wheels, *image.installs)
        if image.nvidia_smi and nvidia_smi is not None:
            for branch in NVIDIA_SMI_BRANCHES:
                run("buildah", "copy", "--quiet", working, str(nvidia_smi / branch),
                    f"{IMAGE_CACHE}/nvidia-smi/{branch}", quiet=True)
        config = ["--env", "PYTHONUNBUFFERED=1", "--env", "PYTHONDONTWRITEBYTECODE=1",
                  "--env", f"MOKKA_MAIN={image.main}", "--env", f"MOKKA_CACHE={IMAGE_CACHE}",
                  *(arg for key, value in image.env for arg in ("--env", f"{key}={value}")),
                  *(arg for key, value in labels(image).items() for arg in ("--label", f"{key}={value}")),
                  "--user", image.user, "--workingdir", "/",
                  "--entrypoint", '["/usr/local/bin/mokka-entrypoint"]', "--cmd", image.command]
        run("buildah", "config", *config, working)
        commit(working, image.reference)


def build(python: str) -> list[Image]:
    if shutil.which("buildah") is None:
        raise BuildError("buildah is not installed (as root: apt-get install buildah)")
    built = images()
    base = base_image()
    nvidia_smi = fetch_nvidia_smi(python)
    with tempfile.TemporaryDirectory(prefix="mokka-wheels-") as scratch:
        wheels = Path(scratch)
        build_wheels(python, wheels)
        runtime = runtime_image(base, wheels)
        for image in built:
            print(f"images: {image.reference}", flush=True)
            build_image(image, runtime, wheels, nvidia_smi)
    run("buildah", "rmi", runtime, quiet=True)
    return built


# -- publish -------------------------------------------------------------------------------------------

def loopback(registry: str) -> bool:
    """A registry on this machine speaks plain HTTP (as Docker's and containerd's defaults assume)."""
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    return host.strip("[]") in {"127.0.0.1", "localhost", "::1"}


def chart_versions() -> tuple[str, str]:
    text = (CHART / "Chart.yaml").read_text()
    found = {k: v.strip().strip('"') for k, v in re.findall(r"^(version|appVersion):\s*(.+)$", text, re.M)}
    return found["version"], found["appVersion"]


def publish(registry: str, helm: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+", registry):
        raise BuildError(f"REGISTRY={registry!r}: expected host[:port]")
    chart_version, app_version = chart_versions()
    node_version = package_version("mokka-core")
    if app_version != node_version:
        raise BuildError(f"charts/mokka/Chart.yaml appVersion {app_version} is not the node image's tag "
                         f"{node_version} (mokka-core's version)")
    plain = loopback(registry)
    for image in images():
        if not image_exists(image.reference):
            raise BuildError(f"{image.reference} is not built (make images)")
        target = f"docker://{registry}/{image.name}:{image.version}"
        print(f"publish: {target}", flush=True)
        run("buildah", "push", "--quiet", f"--tls-verify={'false' if plain else 'true'}", image.reference, target)
    with tempfile.TemporaryDirectory(prefix="mokka-chart-") as scratch:
        run(helm, "package", str(CHART), "--destination", scratch, quiet=True)
        package = Path(scratch) / f"mokka-{chart_version}.tgz"
        print(f"publish: oci://{registry}/charts/mokka:{chart_version}", flush=True)
        run(helm, "push", str(package), f"oci://{registry}/charts", *(["--plain-http"] if plain else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="build the node image and the seven surface images")
    build_command.add_argument("--python", default=sys.executable, help="the interpreter that builds the wheels")
    publish_command = commands.add_parser("publish", help="push every image and the chart to REGISTRY")
    publish_command.add_argument("registry", help="host[:port] of an OCI registry")
    publish_command.add_argument("--helm", default="helm", help="helm v3.8+")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            for image in build(args.python):
                print(f"{image.reference}\t{image_size(image.reference)}")
        else:
            publish(args.registry, args.helm)
    except BuildError as error:
        print(f"images: {error}", file=sys.stderr)
        return 1
    return 0


def image_size(reference: str) -> str:
    return run("buildah", "images", "--format", "{{.Size}}", reference, capture=True)


if __name__ == "__main__":
    sys.exit(main())
