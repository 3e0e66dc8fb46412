"""Fixtures: fake IMEX daemons stopped after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mokka_sim_imex.testing import Daemons


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    running = Daemons()
    yield running
    running.stop_all()
