"""A setuid NVML client run by an unprivileged user ignores MOKKA_* (secure_getenv, as glibc ignores
LD_LIBRARY_PATH under AT_SECURE), so it cannot be pointed at a file only root may read (issue 18, item 8)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import nvml_env
from mkstate import consumers, make_state, write_state

CLIENT = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { printf("dlopen: %s\n", dlerror()); return 2; }
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    printf("%d\n", init());
    return 0;
}
"""



@pytest.fixture()
def setuid_client(lib_dir):
    """A setuid-root NVML client and a copy of the library, in a directory every user can reach."""
    if os.geteuid() != 0 or shutil.which("gcc") is None or shutil.which("setpriv") is None:
        consumers.missing("needs root (a setuid binary), gcc and setpriv; CI has them")
    d = Path(tempfile.mkdtemp(prefix="mokka-secure-env-"))
    try:
        os.chmod(d, 0o755)
        (d / "client.c").write_text(CLIENT)
        subprocess.run(["gcc", "-o", str(d / "client"), str(d / "client.c"), "-ldl"], check=True)
        os.chmod(d / "client", 0o4755)
        lib = d / "libnvidia-ml.so.1"
        shutil.copy((lib_dir / "libnvidia-ml.so.1").resolve(), lib)
        os.chmod(lib, 0o755)
        yield d
    finally:
        shutil.rmtree(d)


def run_as_nobody(d: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(d / "client"),
                           str(d / "libnvidia-ml.so.1")], env=nvml_env(d, None, **env), capture_output=True,
                          text=True, timeout=30)


def test_setuid_client_ignores_mokka_env(setuid_client):
    secret = setuid_client / "root-only.state"
    write_state(secret, make_state("t4"))
    os.chmod(secret, stat.S_IRUSR)
    p = run_as_nobody(setuid_client, MOKKA_NVML_STATE=str(secret), MOKKA_DEBUG="all")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "9", p.stdout           # no state file next to the library: no driver
    assert str(secret) not in p.stderr and "debug" not in p.stderr, p.stderr


def test_plain_client_still_follows_mokka_env(setuid_client):
    """The same binary without the setuid bit (no AT_SECURE) reads MOKKA_NVML_STATE as before."""
    state = setuid_client / "open.state"
    write_state(state, make_state("t4"))
    os.chmod(state, 0o644)
    os.chmod(setuid_client / "client", 0o755)
    p = run_as_nobody(setuid_client, MOKKA_NVML_STATE=str(state))
    assert p.returncode == 0 and p.stdout.strip() == "0", p.stdout + p.stderr
