"""Where a node keeps its state under its root: paths relative to the root, and nothing else.

A module of constants only, so that a client that must start fast (``nvml-mock-ctl`` handing a
command to the node daemon) can find the daemon's socket without importing the node code.
"""

STATE_DIR = "var/lib/mokka"
NODE_FILE = f"{STATE_DIR}/node.json"
OVERRIDE_FILE = f"{STATE_DIR}/overrides.yaml"
OVERLAY_FILE = f"{STATE_DIR}/topology.yaml"
LOCK_FILE = f"{STATE_DIR}/overrides.yaml.lock"
DAEMON_FILE = f"{STATE_DIR}/daemon.json"
SUPERVISORD_CONFIG = f"{STATE_DIR}/supervisord.conf"
SUPERVISORD_PID = f"{STATE_DIR}/supervisord.pid"
SUPERVISORD_SOCKET = f"{STATE_DIR}/supervisor.sock"
MANIFESTS_DIR = f"{STATE_DIR}/manifests"
SURFACE_CACHE = f"{STATE_DIR}/surfaces.json"
SNAPSHOT = f"{STATE_DIR}/snapshot.json"
#: Read by the preload library (C): while it exists, nothing is redirected.
PRELOAD_KILL_SWITCH = f"{STATE_DIR}/preload-disabled"
#: Runtime markers of the simulated daemons.
RUN_DIR = f"{STATE_DIR}/run"
#: Exists exactly while the fake fabric manager has the fabric trained; the NVML library reports
#: fabric state ``auto`` as In Progress until it exists, then Completed.
FABRICMANAGER_READY = f"{RUN_DIR}/fabricmanager.ready"
IB_DIR = f"{STATE_DIR}/ib"
#: The node's kernel log as /dev/kmsg records (``pri,seq,usec,flags;text``), what /dev/kmsg serves.
KERNEL_LOG = f"{STATE_DIR}/kmsg"
#: The last record of the kernel log written to the host's kernel log (``mokka node up --host-kmsg``).
KERNEL_LOG_FORWARDED = f"{STATE_DIR}/kmsg.forwarded"
IMEX_DIR = f"{STATE_DIR}/imex"
#: The node daemon runs nvml-mock-ctl commands sent here (``node.relay``, ``ctl.relay``).
CTL_SOCKET = f"{STATE_DIR}/ctl.sock"
#: Each service's own log (``<program>.log``, rotated by supervisord) and the node's one log stream.
LOG_DIR = f"{STATE_DIR}/log"
#: Every line of the daemon, supervisord and the services, each prefixed ``[source] `` (``node.logstream``).
NODE_LOG = f"{LOG_DIR}/node.log"
#: The CDI spec the cdi surface stages (its ``/var/run/cdi/nvidia.yaml``), what ``mokka node up --cdi-spec-dir`` links.
CDI_SPEC = "var/run/cdi/nvidia.yaml"
