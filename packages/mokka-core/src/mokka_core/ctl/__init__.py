"""``nvml-mock-ctl``: change a running simulated node (faults, metrics, surfaces); no daemon needed.

:mod:`.relay` is the entry point: where a node daemon listens it runs the command there
(the same :func:`.cli.execute`), else here.
:mod:`.store` owns the override file (locked read-modify-write, atomic replace,
re-render), starting from the node's snapshot (:mod:`mokka_core.stage.snapshot`) so
a change needs no pydantic; :mod:`.verbs` turns each command into a change of the
override document; :mod:`.cli` parses the command line with lean imports so a
change lands quickly; :mod:`.report` prints what the node looks like now.
"""
