"""The package installs, registers its surface, and its CLI explains itself."""

from mokka_core.testing.sim_contract import SimContract
from mokka_sim_imex.cli import app
from mokka_sim_imex.surface import ImexSurface


class TestContract(SimContract):
    app = app
    surface = ImexSurface
    #: the daemon's configuration and domain are dataclasses
    service_may_load = frozenset({"dataclasses"})
