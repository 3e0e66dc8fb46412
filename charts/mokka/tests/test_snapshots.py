"""Snapshots of the rendered DaemonSet and ConfigMaps, committed under __snapshots__/.

A change in the chart (or in a profile) shows up as a diff here; accept it with
`pytest charts/mokka/tests --update-snapshots` (or MOKKA_UPDATE_SNAPSHOTS=1) and commit the files.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from chartlib import CHART, Helm, documents

PROFILES = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (profile and overlay bodies) as literal blocks, so snapshot diffs read line by line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=120)


def strip_volatile(docs: list[dict]) -> list[dict]:
    """Leave out what other tests pin and what changes for reasons outside the chart: the chart version
    label, the checksum (test_render checks when it changes) and a built-in profile's body (test_render and
    test_fake_gpu_operator check it equals profiles/<p>.yaml), so editing a profile in mokka-core needs
    tools/chart_profiles.py but no new snapshots."""
    bodies = {(CHART / "profiles" / f"{p}.yaml").read_text(): f"<profiles/{p}.yaml>" for p in PROFILES}
    for doc in docs:
        doc["metadata"].get("labels", {}).pop("helm.sh/chart", None)
        data = doc.get("data", {})
        if data.get("profile.yaml") in bodies:
            data["profile.yaml"] = bodies[data["profile.yaml"]]
        annotations = doc.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
        if "checksum/config" in annotations:
            annotations["checksum/config"] = "<sha256 of profile and overlay>"
    return docs


@pytest.mark.parametrize("profile", PROFILES)
def test_daemonset_and_profile_configmap(helm: Helm, snapshot: Callable[[str, str], None], profile: str) -> None:
    docs = strip_volatile(documents(helm.render({"gpu": {"profile": profile}})))
    assert {d["kind"] for d in docs} == {"DaemonSet", "ConfigMap"}
    snapshot(f"{profile}-defaults", dump(docs))


def test_every_option_set(helm: Helm, snapshot: Callable[[str, str], None]) -> None:
    values = {
        "gpu": {"profile": "gb200", "count": 4},
        "surfaces": {"imex": {"state": "failed"}, "ib": {"enabled": False}},
        "topology": {"domains": [{"name": "rack-1", "uuid": "8c4f3b1e-5d2a-4e6f-9a7b-0c1d2e3f4a5b",
                                  "cliques": [{"id": 0, "nodes": ["tray-0", "tray-1"]}]}]},
        "nodeSelector": {"mokka.dev/pool": "gb200"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
        "podAnnotations": {"example.com/owner": "sim-team"},
        "podLabels": {"team": "sim"},
        "imagePullSecrets": [{"name": "pull"}],
        "images": {"node": {"registry": "registry.example", "tag": "dev"}},
        "allocationWatcher": {"enabled": True},
        "nri": {"enabled": True, "namespaces": ["team-a"]},
        "kernelLog": {"host": True},
    }
    docs = [d for d in strip_volatile(documents(helm.render(values))) if not d["metadata"]["name"].startswith("gpu-")]
    snapshot("gb200-every-option", dump(docs))


def test_fake_gpu_operator_configmaps(helm: Helm, snapshot: Callable[[str, str], None]) -> None:
    values = {"integrations": {"fakeGpuOperator": {"enabled": True, "targetNamespace": "gpu-operator"}}}
    docs = [d for d in strip_volatile(documents(helm.render(values)))
            if d["metadata"]["name"].startswith("gpu-profile-")]
    assert len(docs) == len(PROFILES)
    snapshot("fake-gpu-operator-configmaps", dump(docs))
