"""The node daemon (``mokka node``): stage every surface all-or-nothing, supervise services, re-render.

Layout:

* :mod:`.settings` - what a node daemon run is configured with (explicit, no globals)
* :mod:`.supervise` - the generated supervisord config and a small client for it
* :mod:`.logstream` - the node's one log: every source's lines prefixed, read by ``mokka node logs``
* :mod:`.runstate` - the daemon's bookkeeping file (pid, phase), read by ``status`` and ``down``
* :mod:`.daemon` - ``run(settings, stop_flag, ready_flag)``: the one run loop
* :mod:`.rest` - the daemon at rest: a lean program (standard library only) it execs in its own process
  until there is work; :mod:`.tail` - a log file read on, for both
* :mod:`.teardown` - stop services and remove every trace of a node, even after SIGKILL
* :mod:`.cli` - the thin ``mokka node up|down|status`` typer app

The render engine and the node lock it shares with ``nvml-mock-ctl`` live in :mod:`mokka_core.stage`.
"""
