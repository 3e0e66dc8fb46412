"""Where the fake fabric manager keeps its readiness marker, relative to a staged root.

The NVML view reads fabric state ``auto`` as "In Progress" until this file exists,
then "Completed" (the lead hoists the constant into ``mokka_core.paths``).
"""

RUN_DIR = "var/lib/mokka/run"
FABRICMANAGER_READY_FILE = f"{RUN_DIR}/fabricmanager.ready"
