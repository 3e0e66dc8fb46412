"""Fuzz target: mutated profile / override / overlay documents through validation, resolve, apply and the NVML renderer.

One input is up to three YAML documents separated by a ``%%`` line: a profile, a runtime
override, a topology overlay (the later ones optional).  They go the way ``mokka run`` and the
node daemon take them: ``schema.loader`` validation, ``model.resolve``, ``model.apply``,
``render_nvml_state``.  A refusal is a :class:`~mokka_core.errors.MokkaError` (a ``ConfigError``
names the file and key); any other exception is a defect, and the fuzzer stops on it.

    python packages/mokka-core/fuzz/fuzz_documents.py --seed-corpus SEEDS    # SEEDS/ and SEEDS.dict
    python packages/mokka-core/fuzz/fuzz_documents.py -max_total_time=30 -dict=SEEDS.dict CORPUS SEEDS

atheris (PyPI) drives it; :func:`one_input` alone has no atheris dependency (the tests replay the corpus).
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

SEPARATOR = "\n%%\n"
#: a fixed host, so that an input means the same node on every machine
HOST_CPUS = tuple(range(16))
SEED_OVERRIDES = (
    "all: {power: {current_draw_mw: 95000}, memory: {used_bytes: 1024}}\n",
    "devices: {'1': {thermal: {temperature_gpu_c: 90}}}\nsurfaces: {ib: {state: failed}}\n",
    "version: 1\nall: {remapped_rows: null, fabric: null}\ndevices: {'0': {performance_state: P2}}\n",
)
SEED_OVERLAY = ("version: 1\ndomains:\n- uuid: 8d2c1a77-3b4e-4f0a-9c1d-2e3f4a5b6c7d\n"
                "  cliques: [{id: 3, nodes: [mokka-node]}]\n")


def one_input(data: bytes) -> None:
    """Run one input through the pipeline; return normally on success or a documented refusal."""
    from mokka_core.errors import MokkaError
    from mokka_core.model.inputs import Inputs
    from mokka_core.model.resolve import resolve
    from mokka_core.schema.loader import load_profile_text, validate
    from mokka_core.schema.overlays import Override, TopologyOverlay
    from mokka_core.schema.yamldoc import parse_yaml
    from mokka_core.stage.nvml_view import render_nvml_state

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # every reader opens its documents as UTF-8 and refuses other bytes before YAML sees them
    profile_text, override_text, overlay_text = [*text.split(SEPARATOR, 2), "", ""][:3]
    try:
        profile = load_profile_text(profile_text, "profile.yaml")
        override = (validate(Override, parse_yaml(override_text, "overrides.yaml"), "overrides.yaml", strict_keys=True)
                    if override_text.strip() else None)
        overlay = (validate(TopologyOverlay, parse_yaml(overlay_text, "topology.yaml"), "topology.yaml",
                            strict_keys=True) if overlay_text.strip() else None)
        node = resolve(Inputs(profile=profile, profile_source="profile.yaml", overlay=overlay, override=override,
                              override_source="overrides.yaml", host_cpus=HOST_CPUS))
        render_nvml_state(node)
    except MokkaError:
        pass


def key_names() -> list[str]:
    """Every key a profile or override may spell (the fuzzer's dictionary)."""
    from mokka_core.schema.overlays import Override, TopologyOverlay
    from mokka_core.schema.profile import Profile

    names: set[str] = set()
    for model in (Profile, Override, TopologyOverlay):
        schema = model.model_json_schema()
        for part in [schema, *schema.get("$defs", {}).values()]:
            names.update(part.get("properties", {}))
    return sorted(names)


def seed_corpus(directory: Path) -> None:
    """The built-in profiles, each alone and with an override (and one with the overlay); ``keys.dict`` beside it."""
    from mokka_core.schema.builtin import builtin_text
    from mokka_core.schema.profiles import __path__ as profiles_dir

    directory.mkdir(parents=True, exist_ok=True)
    tokens = [f"{name}: " for name in key_names()] + [SEPARATOR, "null", "- ", "{", "}", "[", "]", "0x", "-1"]
    directory.with_suffix(".dict").write_text("".join(f"{_quoted(token)}\n" for token in tokens))
    names = sorted(p.stem for p in Path(profiles_dir[0]).glob("*.yaml"))
    for n, name in enumerate(names):
        profile = builtin_text(name)
        (directory / f"{name}").write_text(profile)
        override = SEED_OVERRIDES[n % len(SEED_OVERRIDES)]
        (directory / f"{name}-override").write_text(profile + SEPARATOR + override)
        (directory / f"{name}-overlay").write_text(profile + SEPARATOR + override + SEPARATOR + SEED_OVERLAY)


def _quoted(token: str) -> str:
    return '"' + "".join(c if c.isalnum() or c in "_:- .{}[]" else f"\\x{ord(c):02x}" for c in token) + '"'


def main() -> None:
    if sys.argv[1:2] == ["--seed-corpus"]:
        seed_corpus(Path(sys.argv[2]))
        return
    import atheris

    logging.disable(logging.WARNING)  # "unknown key ignored" for every mutated key
    with atheris.instrument_imports(include=["mokka_core"]):
        for module in ("mokka_core.schema.loader", "mokka_core.model.resolve", "mokka_core.stage.nvml_view"):
            importlib.import_module(module)  # instrumented: coverage feedback for the fuzzer
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
