"""The documents fuzz target (fuzz/fuzz_documents.py, `tox -e fuzz`) replayed without atheris: its seed corpus,
and every input it found that raised something other than a MokkaError (fuzz/regressions/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mokka_core.schema.builtin import BUILTIN_PROFILES

FUZZ = Path(__file__).parent.parent / "fuzz"
REGRESSIONS = sorted((FUZZ / "regressions").iterdir())


def _target():
    spec = importlib.util.spec_from_file_location("fuzz_documents", FUZZ / "fuzz_documents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = _target()


def test_the_seed_corpus_runs_through_the_whole_pipeline(tmp_path: Path) -> None:
    target.seed_corpus(tmp_path / "seeds")
    seeds = sorted((tmp_path / "seeds").iterdir())
    # a profile, an overlay and an override seed per built-in profile
    assert len(seeds) == 3 * len(BUILTIN_PROFILES) and (tmp_path / "seeds.dict").read_text().count("\n") > 100
    for seed in seeds:
        target.one_input(seed.read_bytes())


@pytest.mark.parametrize("found", REGRESSIONS, ids=[path.name for path in REGRESSIONS])
def test_what_the_fuzzer_found_is_a_refusal(found: Path) -> None:
    target.one_input(found.read_bytes())
