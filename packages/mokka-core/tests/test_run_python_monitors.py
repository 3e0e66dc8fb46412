"""Python GPU monitors built on nvidia-ml-py 13.x (nvitop, gpustat) inside ``mokka run``.

They prefer the newest calls they find exported (nvitop reads the temperature with
``nvmlDeviceGetTemperatureV``), so each must answer as the older call does. The temperatures are
pinned with nvml-mock-ctl first, so the expected values are the test's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mokka_core.testing import consumers
from mokka_core.testing.consumers import ConsumerUnavailable, missing, required

pytestmark = [pytest.mark.consumer, pytest.mark.usefixtures("whole_node")]

PINNED = {0: 77, 1: 52}
MONITORS = """
import json
from nvitop import Device
import gpustat
stats = gpustat.new_query().jsonify()
print(json.dumps({
    "nvitop": [[d.name(), d.temperature(), d.memory_total()] for d in Device.all()],
    "gpustat": [[g["name"], g["temperature.gpu"], g["memory.total"]] for g in stats["gpus"]],
}))
"""


@pytest.fixture(scope="module")
def monitors() -> str:
    if os.geteuid() != 0 and not required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    try:
        return str(consumers.python_packages(consumers.PYTHON_MONITORS))
    except ConsumerUnavailable as exc:
        missing(str(exc))


@pytest.mark.parametrize("profile, gpus, name, mib", [("h100", 8, "NVIDIA H100 80GB HBM3", 81559),
                                                      ("t4", 2, "Tesla T4", 15360)])
def test_nvitop_and_gpustat_read_the_pinned_temperatures(monitors: str, profile: str, gpus: int, name: str,
                                                         mib: int) -> None:
    ctl = " && ".join(f"nvml-mock-ctl temp {index} {celsius}" for index, celsius in PINNED.items())
    script = f'{ctl} && PYTHONPATH={monitors} {sys.executable} -c "$0"'
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", profile, "--gpus", str(gpus),
                           "--", "sh", "-c", script, MONITORS], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    temperatures = [PINNED.get(index, seen["gpustat"][index][1]) for index in range(gpus)]
    assert [row[1] for row in seen["gpustat"]] == temperatures
    assert [row[1] for row in seen["nvitop"]] == temperatures  # GetTemperatureV, as GetTemperature
    assert {row[0] for row in seen["gpustat"]} == {name}
    assert {row[2] for row in seen["nvitop"]} == {mib * 1024 * 1024}
