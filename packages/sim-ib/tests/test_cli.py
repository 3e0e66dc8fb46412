"""The package installs, registers its surface, and its CLI explains itself."""

from mokka_core.testing.sim_contract import SimContract
from mokka_sim_ib.cli import app
from mokka_sim_ib.surface import IbSurface


class TestContract(SimContract):
    app = app
    surface = IbSurface
    #: the responder is an asyncio server (asyncio brings subprocess) that logs what it answers
    service_may_load = frozenset({"asyncio", "subprocess", "logging", "dataclasses"})
