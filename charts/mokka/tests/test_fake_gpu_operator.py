"""The fake-gpu-operator contract, field by field: FGO does Get("gpu-profile-" + name) in its own
namespace, reads key profile.yaml, and only ConfigMaps labelled fake-gpu-operator/gpu-profile: "true"."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartlib import CHART, Helm, documents

PROFILES = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")


def fgo_maps(helm: Helm, fgo: dict[str, Any], **values: Any) -> dict[str, dict[str, Any]]:
    docs = documents(helm.render({"integrations": {"fakeGpuOperator": fgo}, **values}))
    return {d["metadata"]["name"]: d for d in docs
            if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpu-profile-")}


def test_off_by_default(helm: Helm) -> None:
    assert fgo_maps(helm, {}) == {}


def test_one_configmap_per_builtin_profile_whatever_the_node_profile(helm: Helm) -> None:
    maps = fgo_maps(helm, {"enabled": True}, gpu={"profile": "t4"})
    assert sorted(maps) == sorted(f"gpu-profile-{p}" for p in PROFILES)
    for profile in PROFILES:
        cm = maps[f"gpu-profile-{profile}"]
        assert cm["apiVersion"] == "v1" and cm["kind"] == "ConfigMap"
        assert cm["metadata"]["namespace"] == "mokka"  # the release namespace by default
        assert list(cm["data"]) == ["profile.yaml"]
        assert "binaryData" not in cm
        # the raw profile file: comments kept, no overlay, no count injected
        assert cm["data"]["profile.yaml"] == (CHART / "profiles" / f"{profile}.yaml").read_text()
        body = yaml.safe_load(cm["data"]["profile.yaml"])
        assert body["name"] == profile and body["system"]["driver_version"]
        labels = cm["metadata"]["labels"]
        assert labels["fake-gpu-operator/gpu-profile"] == "true"
        assert labels["run.ai/gpu-profile"] == "true"  # default profileLabels
        assert labels["mokka/profile-name"] == profile
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "mokka-test"


def test_target_namespace_is_fgo_release_namespace(helm: Helm) -> None:
    maps = fgo_maps(helm, {"enabled": True, "targetNamespace": "gpu-operator"})
    assert {cm["metadata"]["namespace"] for cm in maps.values()} == {"gpu-operator"}


def test_profile_labels_add_but_never_remove_contract_labels(helm: Helm) -> None:
    extra = {"team": "sim", "run.ai/gpu-profile": "yes", "mokka/profile-name": "hijack",
             "fake-gpu-operator/gpu-profile": "true"}
    maps = fgo_maps(helm, {"enabled": True, "profileLabels": extra})
    for name, cm in maps.items():
        labels = cm["metadata"]["labels"]
        assert labels["team"] == "sim" and labels["run.ai/gpu-profile"] == "yes"
        assert labels["fake-gpu-operator/gpu-profile"] == "true"
        assert labels["mokka/profile-name"] == name.removeprefix("gpu-profile-")


def test_dropping_the_default_label_keeps_the_contract_label(helm: Helm) -> None:
    maps = fgo_maps(helm, {"enabled": True, "profileLabels": {"run.ai/gpu-profile": None}})
    for cm in maps.values():
        assert cm["metadata"]["labels"]["fake-gpu-operator/gpu-profile"] == "true"
        assert "run.ai/gpu-profile" not in cm["metadata"]["labels"]


@pytest.mark.parametrize("value", [True, 1])
def test_non_string_label_values_become_strings(helm: Helm, value: Any) -> None:
    maps = fgo_maps(helm, {"enabled": True, "profileLabels": {"flag": value}})
    assert {cm["metadata"]["labels"]["flag"] for cm in maps.values()} == {str(value).lower()}


def test_fgo_profiles_load_in_mokka(helm: Helm) -> None:
    """What FGO hands to its mock backend is a profile Mokka itself accepts."""
    from mokka_core.schema.loader import load_profile_text

    for name, cm in fgo_maps(helm, {"enabled": True}).items():
        profile = load_profile_text(cm["data"]["profile.yaml"], f"{name}:profile.yaml")
        assert profile.system.driver_version
