"""No real consumer's device query calls a NOT_SUPPORTED stub, on any built-in profile (stub_census.py):
nvidia-smi 555 in every mode, nvidia-ml-py 13.x's one-handle getters, the go-nvml program of tests/k8s/gonvml.
All ten profiles: the three consumers take about a minute on them together."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from stub_census import census

from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_core.testing.consumers import required


@pytest.fixture()
def real_node() -> None:
    from mokka_core.stage.surface import discover

    if os.geteuid() != 0 and not required():
        pytest.skip("mokka run needs root (mount namespaces); CI runs as root")
    if not {"gpu", "pci"} <= set(discover()):
        reason = "mokka run needs mokka-sim-gpu and mokka-sim-pci (tox -e native installs them)"
        pytest.fail(reason) if required() else pytest.skip(reason)


@pytest.mark.usefixtures("real_node")
def test_no_consumer_calls_a_stub_on_any_builtin_profile(lib_dir: Path) -> None:
    result = census(list(BUILTIN_PROFILES), native_dir=lib_dir)
    assert set(result) == {"nvidia-smi 555", "nvidia-ml-py==13.615.71", "go-nvml (tests/k8s/gonvml)"}
    assert all(set(per_profile) == set(BUILTIN_PROFILES) for per_profile in result.values())
    called = {consumer: {profile: names for profile, names in per_profile.items() if names}
              for consumer, per_profile in result.items()}
    assert not any(called.values()), f"stubs called (implement them in native/src): {called}"
