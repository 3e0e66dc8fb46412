"""Bad values fail `helm template` with a message that names the value and lists what is valid, both
through values.schema.json and, with the schema skipped, through the templates' own checks."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartlib import CHART, Helm

PROFILE_LIST = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")
SURFACE_LIST = ("gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib")

CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "unknown profile": ({"gpu": {"profile": "v100"}}, ["gpu.profile", *PROFILE_LIST]),
    "unknown surface": ({"surfaces": {"nvswitch": {"enabled": True}}}, ["surfaces", *SURFACE_LIST]),
    "count 0": ({"gpu": {"count": 0}}, ["gpu.count", "1"]),
    "count too large": ({"gpu": {"count": 256}}, ["gpu.count", "255"]),
    "fractional count": ({"gpu": {"count": 1.5}}, ["gpu.count"]),
    "bad surface state": ({"surfaces": {"ib": {"state": "degraded"}}}, ["surfaces.ib.state", "healthy", "failed"]),
    "watcher interval 0": ({"allocationWatcher": {"enabled": True, "interval": 0}},
                           ["allocationWatcher.interval: Must be greater than 0"]),
    "used fraction above 1": ({"allocationWatcher": {"usedFraction": 1.5}},
                              ["allocationWatcher.usedFraction: Must be less than or equal to 1"]),
    "unknown device mode": ({"nri": {"enabled": True, "deviceMode": "some"}},
                            ["nri.deviceMode", '"all", "annotated", "none"']),
    "bad namespace": ({"nri": {"namespaces": ["Team_A"]}}, ["nri.namespaces.0", "Does not match pattern"]),
    "kernel log host not a boolean": ({"kernelLog": {"host": "yes"}}, ["kernelLog.host", "boolean"]),
}

# Without the schema the templates still refuse, with the same information.
TEMPLATE_CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "unknown profile": ({"gpu": {"profile": "v100"}},
                        ['gpu.profile: unknown profile "v100"', "available profiles:", *PROFILE_LIST]),
    "unknown surface": ({"surfaces": {"nvswitch": {"enabled": True, "state": "healthy"}}},
                        ['surfaces.nvswitch: unknown surface "nvswitch"', *SURFACE_LIST]),
    "count 0": ({"gpu": {"count": 0}}, ["gpu.count: must be a whole number from 1 to 255", "got 0"]),
    "bad surface state": ({"surfaces": {"ib": {"state": "degraded"}}},
                          ['surfaces.ib.state: must be healthy or failed, got "degraded"']),
    "watcher interval 0": ({"allocationWatcher": {"enabled": True, "interval": 0}},
                           ["allocationWatcher.interval: must be a number of seconds greater than 0, got 0"]),
    "unknown device mode": ({"nri": {"enabled": True, "deviceMode": "some"}},
                            ['nri.deviceMode: unknown device mode "some"; device modes: all, annotated, none']),
    "kernel log host not a boolean": ({"kernelLog": {"host": "yes"}},
                                      ['kernelLog.host: must be true or false, got "yes"']),
}


def failure(helm: Helm, values: dict[str, Any], *extra: str) -> str:
    result = helm.template(values, extra=extra)
    assert result.returncode != 0, f"helm template accepted {values}"
    assert not result.stdout.strip(), "a failed render must not print manifests"
    return result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_schema_rejects_with_the_valid_choices(helm: Helm, case: str) -> None:
    values, expected = CASES[case]
    message = failure(helm, values)
    assert "values don't meet the specifications of the schema" in message
    for text in expected:
        assert text in message, f"{case}: {text!r} missing from:\n{message}"


@pytest.mark.parametrize("case", sorted(TEMPLATE_CASES))
def test_templates_fail_clearly_without_the_schema(helm: Helm, case: str) -> None:
    values, expected = TEMPLATE_CASES[case]
    message = failure(helm, values, "--skip-schema-validation")
    for text in expected:
        assert text in message, f"{case}: {text!r} missing from:\n{message}"


def test_unknown_top_level_key_is_rejected(helm: Helm) -> None:
    assert "Additional property gpuProfile is not allowed" in failure(helm, {"gpuProfile": "h100"})


def test_contract_label_cannot_be_switched_off(helm: Helm) -> None:
    values = {"integrations": {"fakeGpuOperator": {"enabled": True,
                                                   "profileLabels": {"fake-gpu-operator/gpu-profile": "false"}}}}
    message = failure(helm, values)
    assert "fake-gpu-operator/gpu-profile is a contract label" in message


def test_bad_topology_names_the_missing_key(helm: Helm) -> None:
    message = failure(helm, {"topology": {"domains": [{"uuid": "8c4f3b1e-5d2a-4e6f-9a7b-0c1d2e3f4a5b"}]}})
    assert "topology.domains.0" in message and "cliques is required" in message


def test_custom_profile_needs_version_and_system(helm: Helm) -> None:
    message = failure(helm, {"gpu": {"customProfile": {"name": "mine"}}})
    assert "gpu.customProfile: version is required" in message
    assert "gpu.customProfile: system is required" in message


def test_custom_profile_map_is_checked_against_the_profile_model(helm: Helm) -> None:
    """What the node would refuse, helm refuses first, naming the key path and the valid choices."""
    from mokka_core.errors import ConfigError
    from mokka_core.schema.loader import validate
    from mokka_core.schema.profile import Profile

    body = yaml.safe_load((CHART / "profiles" / "h100.yaml").read_text())
    body["device_defaults"]["memory"]["total_bytes"] = -1
    body["device_defaults"]["architecture"] = "fermi"
    message = failure(helm, {"gpu": {"customProfile": body}})
    assert "gpu.customProfile.device_defaults.memory.total_bytes: Must be greater than 0" in message
    assert "gpu.customProfile.device_defaults.architecture must be one of the following" in message
    assert '"hopper"' in message
    with pytest.raises(ConfigError):  # and the node agrees
        validate(Profile, body, "custom", strict_keys=False)


def test_every_builtin_profile_passes_as_a_custom_profile_map(helm: Helm) -> None:
    """The lax schema accepts what the node accepts: each built-in profile, plus an unknown key and
    numeric strings (warned about / coerced by the node, as in the Go mock's format)."""
    from concurrent.futures import ThreadPoolExecutor

    def render(name: str) -> int:
        body = yaml.safe_load((CHART / "profiles" / f"{name}.yaml").read_text())
        body["vendor_extension"] = {"anything": True}
        body["device_defaults"]["thermal"]["temperature_gpu_c"] = "41"
        return helm.template({"gpu": {"customProfile": body}}).returncode

    with ThreadPoolExecutor(max_workers=4) as pool:
        codes = dict(zip(PROFILE_LIST, pool.map(render, PROFILE_LIST), strict=True))
    assert codes == dict.fromkeys(PROFILE_LIST, 0)


def test_decimal_from_set_is_checked_like_a_number(helm: Helm) -> None:
    """`--set allocationWatcher.interval=0.25` reaches helm as text: accepted and passed on, or refused by range."""
    result = helm.run("template", "m", "--set", "allocationWatcher.enabled=true",
                      "--set", "allocationWatcher.interval=0.25", "--set", "allocationWatcher.usedFraction=1.5")
    assert result.returncode != 0
    assert "allocationWatcher.interval" not in result.stderr  # checked first, and "0.25" passed
    assert "allocationWatcher.usedFraction: must be a number in (0, 1]" in result.stderr and "got 1.5" in result.stderr
