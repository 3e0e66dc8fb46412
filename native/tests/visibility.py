"""Readers that keep NVML open while other processes change node state (a setting, a MIG instance).

Shared by the tests (does each change arrive?) and `tox -e bench` (how fast?). Run one as
`python -c READER COUNT DEADLINE_S` under the mock library's environment on a state of GPU 0 that
allows the change (root; MIG on for MIG_READER). It makes COUNT changes, each in a new process, and
prints one latency in seconds per change, from the changer's exit (its record is renamed before it
returns) to the first call that shows it; it fails if one takes over DEADLINE_S.
"""

_TEMPLATE = '''
import ctypes, subprocess, sys, time
PRELUDE = """
import ctypes, sys
L = ctypes.CDLL("libnvidia-ml.so.1"); assert L.nvmlInit_v2() == 0
d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
"""
exec(PRELUDE)
CHANGE = PRELUDE + {change!r}

def shows(k):
    {probe}

count, deadline = int(sys.argv[1]), float(sys.argv[2])
for k in range(1, count + 1):
    subprocess.run([sys.executable, "-c", CHANGE, str(k)], check=True)
    t0 = time.monotonic()
    while not shows(k):
        if time.monotonic() - t0 > deadline:
            sys.exit(f"change {{k}} not seen after {{deadline}} s")
    print(time.monotonic() - t0)
'''

#: change k sets GPU 0's power limit to 300 W + k W
SETTING_READER = _TEMPLATE.format(
    change="assert L.nvmlDeviceSetPowerManagementLimit(d, 300000 + 1000 * int(sys.argv[1])) == 0",
    probe="v = ctypes.c_uint(); assert L.nvmlDeviceGetPowerManagementLimit(d, ctypes.byref(v)) == 0\n"
          "    return v.value == 300000 + 1000 * k")

#: change k creates GPU 0's k-th 1g.10gb instance (profile id 19; an H100 has room for 7)
MIG_READER = _TEMPLATE.format(
    change="assert L.nvmlDeviceCreateGpuInstance(d, 19, ctypes.byref(ctypes.c_void_p())) == 0",
    probe="n = ctypes.c_uint(); handles = (ctypes.c_void_p * 7)()\n"
          "    assert L.nvmlDeviceGetGpuInstances(d, 19, handles, ctypes.byref(n)) == 0\n"
          "    return n.value == k")
