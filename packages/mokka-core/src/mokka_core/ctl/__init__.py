"""``nvml-mock-ctl``: change a running simulated node (faults, metrics, surfaces) without a daemon.

:mod:`.store` owns the override file (locked read-modify-write, atomic replace,
re-render), from the node's snapshot without pydantic where the verb checks its own
values (:mod:`mokka_core.stage.snapshot`); :mod:`.verbs` turns each command into a change
of the override document; :mod:`.complete` fills the required fields a partial block
needs; :mod:`.cli` parses the command line with lean imports so a change lands
quickly; :mod:`.report` prints what the node looks like now.
"""
