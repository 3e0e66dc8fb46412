"""``nvml-mock-ctl``: change a running simulated node (faults, metrics, surfaces); no daemon needed.

:mod:`.relay` is the entry point: where a node daemon listens it runs the command there
(the same :func:`.cli.execute`), else here.
:mod:`.store` owns the override file (locked read-modify-write, atomic replace,
re-render), starting from the node's snapshot (:mod:`mokka_core.stage.snapshot`) so
a change needs no pydantic; :mod:`.verbs` turns each command into a change of the
override document; :mod:`.cli` parses the command line with lean imports so a
change lands quickly; :mod:`.report` prints what the node looks like now.
:mod:`.shell` installs the shell completion, :mod:`.completion` answers it.
"""

#: set by the shell completion's function: the command prints what completes COMP_LINE (here: read
#: by ``relay`` at every start, which imports nothing for it)
COMPLETE_VAR = "_NVML_MOCK_CTL_COMPLETE"
#: what acts on this user's shell, so never runs in the node daemon
COMPLETION_OPTIONS = ("--install-completion", "--show-completion")
