"""The command lines: ``mokka`` and the one every ``mokka-sim-<name>`` shares."""
