"""What is generated stays generated: the chart's profiles (from mokka-core), values.schema.json and the
README's values table (from tools/chart_schema.py), and the README documents every value."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from chartlib import CHART, REPO, Helm, documents, find


def tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{name}.py"), *args],
                          capture_output=True, text=True)


def test_chart_profiles_match_mokka_core() -> None:
    result = run_tool("chart_profiles", "--check")
    assert result.returncode == 0, result.stderr
    source = REPO / "packages" / "mokka-core" / "src" / "mokka_core" / "schema" / "profiles"
    assert sorted(p.name for p in (CHART / "profiles").glob("*.yaml")) == sorted(p.name for p in source.glob("*.yaml"))


def test_drift_is_reported_and_repaired(tmp_path: Path) -> None:
    profiles = tool("chart_profiles")
    source, target = tmp_path / "core", tmp_path / "chart"
    source.mkdir()
    (source / "a100.yaml").write_text("version: '1.0'\n")
    (source / "t4.yaml").write_text("version: '1.0'\n")
    target.mkdir()
    (target / "a100.yaml").write_text("version: '1.0'\n# edited by hand\n")
    (target / "v100.yaml").write_text("version: '1.0'\n")
    assert profiles.drift(source, target) == {
        "a100.yaml": "differs from mokka-core's copy",
        "t4.yaml": "missing from the chart",
        "v100.yaml": "is not a mokka-core profile",
    }
    profiles.sync(source, target)
    assert profiles.drift(source, target) == {}
    assert sorted(p.name for p in target.iterdir()) == ["a100.yaml", "t4.yaml"]


def test_schema_and_readme_table_are_generated() -> None:
    result = run_tool("chart_schema", "--check")
    assert result.returncode == 0, result.stderr


def test_schema_enums_come_from_mokka_core() -> None:
    import json

    from mokka_core.schema.builtin import BUILTIN_PROFILES
    from mokka_core.schema.overlays import SURFACES

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["gpu"]["properties"]["profile"]["enum"] == list(BUILTIN_PROFILES)
    assert schema["properties"]["surfaces"]["propertyNames"]["enum"] == list(SURFACES)
    assert sorted(p.stem for p in (CHART / "profiles").glob("*.yaml")) == sorted(BUILTIN_PROFILES)


def value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        sub = schema["properties"][key]
        if isinstance(value, dict) and "properties" in sub and sub.get("additionalProperties") is False:
            paths.extend(value_paths(value, sub, f"{prefix}{key}."))
        else:
            paths.append(f"{prefix}{key}")
    return paths


def test_readme_lists_every_value_with_default_and_meaning() -> None:
    import json

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    for path in value_paths(values, schema):
        assert path in rows, f"README has no row for {path}"
        _, default, meaning = rows[path]
        node: Any = values
        for part in path.split("."):
            node = node[part]
        assert default == f"`{json.dumps(node, separators=(', ', ': '))}`", path
        assert len(meaning) > 15, f"{path}: meaning too thin: {meaning!r}"


def test_readme_documents_the_fleet_and_the_fgo_pairing() -> None:
    readme = (CHART / "README.md").read_text()
    for needle in ("A100 and T4 workers side by side", "--set gpu.profile=a100", "--set gpu.profile=t4",
                   "examples/fleet-a100.yaml", "examples/fleet-t4.yaml", "fake-gpu-operator pairing",
                   "builtinProfiles:\n  enabled: false", "backend: mock", "gpu-profile-<profile>",
                   'fake-gpu-operator/gpu-profile: "true"', "targetNamespace"):
        assert needle in readme, needle
    for example in ("fleet-a100", "fleet-t4"):
        values = yaml.safe_load((CHART / "examples" / f"{example}.yaml").read_text())
        assert values["gpu"]["profile"] == example.removeprefix("fleet-")
        assert values["nodeSelector"] == {"mokka.dev/gpu": example.removeprefix("fleet-")}


def readme_helm_commands() -> list[list[str]]:
    """`helm install ...` commands of the README's shell blocks, continuation lines joined."""
    import shlex

    text = (CHART / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("helm install ")]


def test_readme_install_commands_render(helm: Helm) -> None:
    """Every documented `helm install` works as `helm template`; the fleet's releases do not collide."""
    commands = readme_helm_commands()
    assert len(commands) >= 4
    rendered: dict[str, list[dict[str, Any]]] = {}
    for argv in commands:
        args = [a for a in argv[2:] if a != "--create-namespace"]
        release, chart = args[0], args[1]
        assert chart == "charts/mokka", argv
        result = helm.run("template", release, *[a.replace("charts/mokka/", f"{CHART}/") for a in args[2:]])
        assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stderr}"
        rendered[release] = documents(result.stdout)
    a100, t4 = rendered["mokka-a100"], rendered["mokka-t4"]
    names = lambda docs: {(d["kind"], d["metadata"]["name"]) for d in docs}  # noqa: E731
    assert not names(a100) & names(t4), "two releases of a fleet must not share object names"
    for docs, gpu in ((a100, "a100"), (t4, "t4")):
        pod = find(docs, "DaemonSet")["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"mokka.dev/gpu": gpu}
        profile = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-profile")]
        assert yaml.safe_load(profile[0]["data"]["profile.yaml"])["name"] == gpu
