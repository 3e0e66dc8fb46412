"""Where the fake fabric manager keeps its readiness marker, relative to a staged root.

The NVML view reads fabric state ``auto`` as "In Progress" until this file exists, then
"Completed"; the constant lives in ``mokka_core.stage.paths`` so both sides share it.
"""

from mokka_core.stage.paths import FABRICMANAGER_READY_FILE, RUN_DIR

__all__ = ["FABRICMANAGER_READY_FILE", "RUN_DIR"]
