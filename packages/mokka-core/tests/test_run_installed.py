"""mokka run's record of the installed surfaces: discover's answer, and never a stale one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mokka_core.run import installed
from mokka_core.stage.surface import ENTRY_POINT_GROUP, Surface, discover

SURFACE = '''
from mokka_core.stage.surface import Surface


class ExtraSurface(Surface):
    name = "extra"

    def plan(self, node, ctx):
        return []
'''


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MOKKA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / installed.CACHE_DIR


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path that distributions can be installed into."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "mokka_extra_surface.py").write_text(SURFACE)
    monkeypatch.syspath_prepend(str(site))
    return site


def install(site: Path, name: str, target: str = "mokka_extra_surface:ExtraSurface") -> Path:
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nextra = {target}\n")
    return dist


def test_the_record_is_what_discover_finds(cache: Path) -> None:
    first = installed.installed()
    assert first == discover()
    assert len(list(cache.iterdir())) == 1
    assert installed.installed() == first


def test_a_surface_installed_or_changed_since_is_found(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = installed.installed()
    assert "extra" not in before
    dist = install(site, "mokka-extra")
    found = installed.installed()
    assert found["extra"].__name__ == "ExtraSurface" and found == discover()
    (site / "mokka_extra_surface.py").write_text(SURFACE + "\n\nclass Renamed(ExtraSurface):\n    pass\n")
    sys.modules.pop("mokka_extra_surface", None)
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nextra = mokka_extra_surface:Renamed\n")
    assert installed.installed()["extra"].__name__ == "Renamed"
    for path in dist.iterdir():
        path.unlink()
    dist.rmdir()
    assert installed.installed() == before


def test_a_record_that_does_not_import_or_is_corrupt_only_costs_time(cache: Path, site: Path) -> None:
    install(site, "mokka-extra")
    found = installed.installed()
    (record,) = cache.iterdir()
    record.write_text(record.read_text().replace("mokka_extra_surface:ExtraSurface", "mokka_extra_surface:Gone"))
    assert installed.installed() == found
    record.write_text("{")
    assert installed.installed() == found
    assert issubclass(installed.installed()["extra"], Surface)


def test_no_record_where_distributions_may_come_from_a_zip(cache: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dists.zip").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path / "dists.zip"))
    assert installed.installed() == discover()
    assert not cache.exists()
