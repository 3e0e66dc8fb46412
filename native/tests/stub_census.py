"""Which NOT_SUPPORTED stubs real consumers call for a device query, per consumer, on every built-in profile.

Each consumer runs under ``mokka run --profile P`` with ``MOKKA_DEBUG=nvml``, which logs every stub call
(``mokka-nvml: debug: stub <name> -> NOT_SUPPORTED``):
- nvidia-smi 555 in every mode of ``packages/mokka-core/tests/test_run_nvidia_smi_branches.py``;
- nvidia-ml-py (``NVML_PY``) calling every ``nvmlDeviceGet*``/``nvmlDeviceIs*`` that takes a handle only;
- the go-nvml program of ``tests/k8s/gonvml``.

Needs root (mount namespaces) and the gpu and pci surfaces; fetches the consumers into the consumer cache the
first time. ``python native/tests/stub_census.py [PROFILE ...]`` prints, per consumer, the stubs called on any
profile; ``test_stub_census.py`` fails when there is one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_core.stage.native import NATIVE_DIR_ENV
from mokka_core.testing import consumers

REPO = Path(__file__).resolve().parents[2]
NVML_PY = "nvidia-ml-py==13.615.71"
STUB_LINE = re.compile(r"mokka-nvml: debug: stub (\w+) -> NOT_SUPPORTED")
#: every nvidia-smi mode the branch test runs, in one shell
SMI_MODES = ("", "-L", "-q", "-q -x", "--query-gpu=name,memory.total --format=csv", "topo -m", "nvlink -s",
             "dmon -c 1", "dmon --gpm-metrics 2,10,20 -c 3 -i 0", "pmon -c 1")
#: nvidia-ml-py: every one-handle getter on every GPU (exceptions are answers, not failures)
PYNVML_SCRIPT = """
import inspect, pynvml
pynvml.nvmlInit()
names = [n for n in dir(pynvml) if n.startswith(("nvmlDeviceGet", "nvmlDeviceIs"))]
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    for n in names:
        f = getattr(pynvml, n)
        try:
            required = [p for p in inspect.signature(f).parameters.values() if p.default is p.empty]
        except (TypeError, ValueError):
            continue
        if len(required) == 1:
            try:
                f(h)
            except Exception:
                pass
"""


def wide_query() -> str:
    sys.path.insert(0, str(REPO / "packages" / "mokka-core" / "tests"))
    from test_run_nvidia_smi_branches import WIDE_FIELDS

    return "--query-gpu=" + ",".join(WIDE_FIELDS) + " --format=csv"


def nvml_py() -> Path:
    """nvidia-ml-py 13.x in the consumer cache (its own folder: the test venv keeps 12.550)."""
    try:
        return consumers.python_packages((NVML_PY,))
    except consumers.ConsumerUnavailable as exc:
        consumers.missing(str(exc))


def stubs_called(profile: str, *command: str, env: dict[str, str]) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", profile, "--", *command],
                          capture_output=True, text=True, timeout=600, env={**env, "MOKKA_DEBUG": "nvml"})
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} on {profile}: rc {done.returncode}: {done.stderr[-2000:]}")
    return set(STUB_LINE.findall(done.stdout + done.stderr))


def census(profiles: list[str], native_dir: Path | None = None) -> dict[str, dict[str, list[str]]]:
    """{consumer: {profile: sorted stub names}}, with the library in ``native_dir`` (default: the installed one)"""
    smi = consumers.require("nvidia-smi", version="555")
    script = "".join(f"{smi} {args} >/dev/null </dev/null\n" for args in (*SMI_MODES, wide_query()))
    gonvml = consumers.go_module_program(REPO / "tests" / "k8s" / "gonvml", ".", "gonvml")
    env = {**os.environ, **({NATIVE_DIR_ENV: str(native_dir)} if native_dir else {})}
    pynvml_env = {**env, "PYTHONPATH": str(nvml_py())}
    runs = {
        "nvidia-smi 555": lambda p: stubs_called(p, "sh", "-c", script, env=env),
        NVML_PY: lambda p: stubs_called(p, sys.executable, "-c", PYNVML_SCRIPT, env=pynvml_env),
        "go-nvml (tests/k8s/gonvml)": lambda p: stubs_called(p, str(gonvml), env=env),
    }
    return {consumer: {p: sorted(run(p)) for p in profiles} for consumer, run in runs.items()}


def main() -> None:
    profiles = sys.argv[1:] or list(BUILTIN_PROFILES)
    result = census(profiles)
    for consumer, per_profile in result.items():
        union = sorted(set().union(*per_profile.values()))
        print(f"{consumer}: {len(union)} stubs called on {len(per_profile)} profiles")
        for name in union:
            missing_on = [p for p, names in per_profile.items() if name not in names]
            print(f"  {name}" + (f"  (not on {', '.join(missing_on)})" if missing_on else ""))


if __name__ == "__main__":
    main()
