"""``python -m mokka_core.ctl``: the same as ``nvml-mock-ctl``."""

from .relay import main

main()
