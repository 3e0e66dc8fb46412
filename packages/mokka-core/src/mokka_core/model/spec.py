"""NodeSpec: where a node's inputs live, and the single place they are read and resolved."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..schema.builtin import DEFAULT_PROFILE, builtin_path
from ..schema.surfaces import SURFACES
from .inputs import Fingerprint, Inputs, fingerprint, host_cpus_fingerprint
from .node import Node
from .numa import HOST_CPUS_FILE, parse_cpulist


@dataclass(frozen=True)
class NodeSpec:
    """What a node is made of.  ``profile`` names a built-in; ``profile_file`` wins over it.

    Surface settings: ``surfaces`` (the command line's) go over those of ``surfaces_file``.
    """

    profile: str | None = None
    profile_file: Path | None = None
    gpus: int | None = None
    node_name: str | None = None
    overlay_file: Path | None = None
    override_file: Path | None = None
    surfaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    surfaces_file: Path | None = None
    #: the CPU list the node's CPUs are folded onto (``model.numa``); None: the host's online CPUs
    host_cpus: str | None = None

    def __post_init__(self) -> None:
        # what the type hints say, checked: Python callers (testing.Node) pass anything
        problems = []
        if self.profile is not None and (not isinstance(self.profile, str) or not self.profile.strip()):
            problems.append(("profile", f"a built-in profile's name such as {DEFAULT_PROFILE!r}, got {self.profile!r}"))
        if self.gpus is not None and (isinstance(self.gpus, bool) or not isinstance(self.gpus, int)):
            problems.append(("gpus", f"a number of GPUs, got {self.gpus!r}"))
        if problems:
            raise ConfigError("the node's spec", problems)

    def inputs(self, *, with_override: bool = True) -> Inputs:
        """Read the profile, overlay, surfaces and (unless told not to) override file as they are on disk now.

        Each file's fingerprint is taken before it is read, for the node's snapshot (see ``snapshot``).
        """
        from ..schema.builtin import load_builtin  # pydantic: only where the files are read
        from ..schema.loader import load_overlay, load_profile, load_surfaces, read_override

        fingerprints = self.fingerprints(with_override=with_override)
        if self.profile_file is not None:
            profile, source = load_profile(self.profile_file), str(self.profile_file)
        else:
            name = self.profile or DEFAULT_PROFILE
            profile, source = load_builtin(name), f"{name}.yaml"
        overlay = None
        if self.overlay_file:
            overlay = load_overlay(self.overlay_file) if self.overlay_file.exists() else None
        surfaces = self.surfaces
        if self.surfaces_file is not None:
            surfaces = _merged(load_surfaces(self.surfaces_file), self.surfaces)
        override_doc, override = None, None
        if self.override_file and with_override:
            override_doc, override = read_override(self.override_file)
        return Inputs(
            host_cpus=self._host_cpus(fingerprints),
            profile=profile,
            profile_source=source,
            gpus=self.gpus,
            node_name=self.node_name,
            overlay=overlay,
            override=override,
            override_source=str(self.override_file),
            surfaces=surfaces,
            override_doc=override_doc,
            fingerprints=fingerprints,
        )

    def fingerprints(self, *, with_override: bool = True) -> dict[str, Fingerprint]:
        """The fingerprint of every input :meth:`inputs` reads (the host's online CPUs where they count), now."""
        profile = self.profile_file if self.profile_file is not None else builtin_path(self.profile or DEFAULT_PROFILE)
        files = [profile, self.overlay_file, self.surfaces_file, self.override_file if with_override else None]
        found = {str(path): fingerprint(str(path)) for path in files if path}
        if self.host_cpus is None:  # the CPUs themselves are the fingerprint (a sysfs file)
            found[HOST_CPUS_FILE] = host_cpus_fingerprint()
        return found

    def resolve(self) -> Node:
        from .resolve import resolve

        return resolve(self.inputs())

    def _host_cpus(self, fingerprints: dict[str, Fingerprint]) -> tuple[int, ...]:
        if self.host_cpus is not None:
            try:
                return parse_cpulist(self.host_cpus)
            except ValueError as exc:
                raise ConfigError("host_cpus", [("", str(exc))]) from None
        online = fingerprints[HOST_CPUS_FILE]
        if not isinstance(online, list):
            raise ConfigError(HOST_CPUS_FILE, [("", "cannot read the host's online CPUs (is /sys mounted?)")])
        return tuple(online)


def surface_settings(disabled: list[str], failed: list[str]) -> dict[str, dict[str, Any]]:
    """Turn ``--disable``/``--fail`` options into surface settings, rejecting unknown names."""
    settings: dict[str, dict[str, Any]] = {}
    for option, names, update in (("--disable", disabled, {"enabled": False}), ("--fail", failed, {"state": "failed"})):
        for name in names:
            if name not in SURFACES:
                raise ConfigError(option, [("", f"unknown surface {name!r}; surfaces: {', '.join(SURFACES)}")])
            settings.setdefault(name, {}).update(update)
    return settings


def _merged(under: dict[str, dict[str, Any]], over: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Surface settings: per surface, the keys of ``over`` replace those of ``under``."""
    return {name: {**under.get(name, {}), **over.get(name, {})} for name in sorted({*under, *over})}
