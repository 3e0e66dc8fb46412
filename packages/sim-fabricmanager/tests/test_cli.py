"""The package installs, registers its surface, and its CLI explains itself."""

from mokka_core.testing.sim_contract import SimContract
from mokka_sim_fabricmanager.cli import app
from mokka_sim_fabricmanager.surface import FabricmanagerSurface


class TestContract(SimContract):
    app = app
    surface = FabricmanagerSurface
