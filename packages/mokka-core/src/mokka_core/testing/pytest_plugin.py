"""The pytest plugin of mokka-core (entry point ``pytest11``): the ``mokka_node`` fixture.

    def test_coolest_gpu(mokka_node):
        node = mokka_node(profile="h100")   # or mokka_node(): the default profile
        node.ctl("temp", "0", "91")

The default profile is the test's ``@pytest.mark.mokka_profile("a100")``, else ``--mokka-profile``,
else h100.  Every node a test makes is closed after it.  Nothing heavier than pytest is imported
until a test asks for a node, so the plugin costs other test runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .node_api import Node

MARKER = "mokka_profile"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("mokka").addoption(
        "--mokka-profile", default=None, metavar="PROFILE",
        help="built-in profile the mokka_node fixture stages by default (default: h100)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(name): the built-in profile mokka_node stages by default")


@pytest.fixture
def mokka_node(request: pytest.FixtureRequest) -> Iterator[Callable[..., Node]]:
    """A factory of staged nodes: ``mokka_node(profile=None, gpus=None, ...)`` takes ``Node``'s arguments."""
    from .node_api import Node

    marker = request.node.get_closest_marker(MARKER)
    if marker is not None and len(marker.args) != 1:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes one profile name, got {marker.args!r}")
    default = marker.args[0] if marker is not None else request.config.getoption("mokka_profile")
    nodes: list[Node] = []

    def make(profile: str | None = None, **kwargs: Any) -> Node:
        if profile is None and kwargs.get("profile_file") is None:
            profile = default or Node.DEFAULT_PROFILE
        node = Node(profile, **kwargs).__enter__()
        nodes.append(node)
        return node

    try:
        yield make
    finally:
        for node in reversed(nodes):
            node.close()
