"""MIG partitioning as node state, with real nvidia-smi (Debian 535, 550 and 555): every step its own process.

The expected tables are `nvidia-smi mig -lgip` of real boards (H100 80GB HBM3, A100-SXM4-40GB)."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import nvml_env
from visibility import MIG_READER

pytestmark = pytest.mark.consumer

# (name, id, free/total, GiB, SM, DEC, ENC, CE, JPEG, OFA) as the real boards print them
H100_LGIP = [("1g.10gb", 19, "7/7", "9.75", 16, 1, 0, 1, 1, 0), ("1g.10gb+me", 20, "1/1", "9.75", 16, 1, 0, 1, 1, 1),
             ("1g.20gb", 15, "4/4", "19.62", 26, 1, 0, 1, 1, 0), ("2g.20gb", 14, "3/3", "19.62", 32, 2, 0, 2, 2, 0),
             ("3g.40gb", 9, "2/2", "39.50", 60, 3, 0, 3, 3, 0), ("4g.40gb", 5, "1/1", "39.50", 64, 4, 0, 4, 4, 0),
             ("7g.80gb", 0, "1/1", "79.25", 132, 7, 0, 8, 7, 1)]
A100_LGIP = [("1g.5gb", 19, "7/7", "4.75", 14, 0, 0, 1, 0, 0), ("1g.5gb+me", 20, "1/1", "4.75", 14, 1, 0, 1, 1, 1),
             ("1g.10gb", 15, "4/4", "9.75", 14, 1, 0, 1, 0, 0), ("2g.10gb", 14, "3/3", "9.75", 28, 1, 0, 2, 0, 0),
             ("3g.20gb", 9, "2/2", "19.62", 42, 2, 0, 3, 0, 0), ("4g.20gb", 5, "1/1", "19.62", 56, 2, 0, 4, 0, 0),
             ("7g.40gb", 0, "1/1", "39.38", 98, 5, 0, 7, 1, 1)]
BOARD_MIB = {"h100": (40448, 9984), "a100": (20096, 4864)}  # the GPU instances' memory, MiB
BOARDS = {"h100": (H100_LGIP, "3g.40gb", "1g.10gb", 39.5), "a100": (A100_LGIP, "3g.20gb", "1g.5gb", 19.625)}


def lgip_rows(out: str) -> list[tuple]:
    lines = [line.strip("|").split() for line in out.splitlines() if line.startswith("|")]
    rows = []
    for first, second in pairwise(lines):
        if len(first) == 10 and first[1] == "MIG" and len(second) == 3:
            _, _, name, id_, free, gib, _p2p, sm, dec, enc = first
            ce, jpeg, ofa = second
            rows.append((name, int(id_), free, gib, int(sm), int(dec), int(enc), int(ce), int(jpeg), int(ofa)))
    return rows


@pytest.mark.parametrize("board", list(BOARDS))
def test_partition_lives_across_processes(smi, lib_dir, state_file, board):
    table, big, small, big_gib = BOARDS[board]
    state = state_file(board, n=2)

    def run(*args: str, rc: int | None = 0) -> str:
        p = subprocess.run([str(smi), *args], env=nvml_env(lib_dir, state), capture_output=True, text=True, timeout=60)
        assert rc is None or p.returncode == rc, f"nvidia-smi {' '.join(args)}: rc={p.returncode}\n{p.stdout}{p.stderr}"
        return p.stdout

    assert lgip_rows(run("mig", "-lgip", rc=None)) == []  # MIG off: no profiles (535: "No MIG-enabled devices")
    assert "Enabled MIG Mode for GPU" in run("-i", "0", "-mig", "1")
    assert lgip_rows(run("mig", "-lgip")) == table
    created = run("mig", "-i", "0", "-cgi", "9,19,19", "-C")
    assert len(re.findall(r"Successfully created GPU instance ID +\d+ on GPU +0", created)) == 3
    assert len(re.findall(r"Successfully created compute instance ID +0 on GPU +0", created)) == 3
    listing = run("-L")
    gpu0 = listing.split("GPU 1:")[0]
    migs = re.findall(r"^  MIG (\S+) +Device +(\d): \(UUID: (MIG-[0-9a-f-]{36})\)$", gpu0, re.M)
    assert [(name, dev) for name, dev, _ in migs] == [(big, "0"), (small, "1"), (small, "2")], listing
    assert "MIG " not in listing.split("GPU 1:")[1]  # GPU 1 untouched
    table_rows = re.findall(r"^\|  0 +(\d+) +(\d+) +(\d) +\| +0MiB / +(\d+)MiB +\| +(\d+) ", run(), re.M)
    # the driver places the 3g at 4:4 (id 2), the 1g at 0:1 and 1:1 (ids 7, 8), as the MIG user guide's
    # `-cgi 9,19,14,19` shows (ids 2, 7, 4, 8); MIG devices follow the instance ids
    assert [(int(gi), int(dev), int(mib)) for gi, _, dev, mib, _ in table_rows] == \
        [(2, 0, BOARD_MIB[board][0]), (7, 1, BOARD_MIB[board][1]), (8, 2, BOARD_MIB[board][1])]  # default view
    assert lgip_rows(run("mig", "-lgip", "-i", "0"))[0][2] == "2/7"  # memory slices 2 and 3 free, 2 compute
    seen = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import pynvml as n
        n.nvmlInit()
        gpu = n.nvmlDeviceGetHandleByIndex(0)
        for i in range(n.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)
            except n.NVMLError_NotFound:
                break
            uuid = n.nvmlDeviceGetUUID(mig)
            again = n.nvmlDeviceGetHandleByUUID(uuid)  # a MIG UUID names the MIG device
            assert n.nvmlDeviceIsMigDeviceHandle(again) and n.nvmlDeviceGetUUID(again) == uuid
            print(uuid, n.nvmlDeviceGetMemoryInfo(mig).total / 2**30)
    """)], env=nvml_env(lib_dir, state), capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    assert [line.split()[0] for line in seen.stdout.splitlines()] == [uuid for _, _, uuid in migs]
    assert float(seen.stdout.split()[1]) == big_gib
    assert "In use by another client" in run("mig", "-dgi", rc=19)  # compute instances first
    assert run("mig", "-dci").count("Successfully destroyed compute instance") == 3
    assert run("mig", "-dgi").count("Successfully destroyed GPU instance") == 3
    assert "MIG " not in run("-L")
    assert "Disabled MIG Mode for GPU" in run("-i", "0", "-mig", "0")


def test_capacity_and_permission_through_the_api(lib_dir, state_file):
    st = state_file("h100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    body = textwrap.dedent("""
        import ctypes, os
        L = ctypes.CDLL("libnvidia-ml.so.1"); assert L.nvmlInit_v2() == 0
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
        gi = ctypes.c_void_p(); U = ctypes.c_uint
        left = U()
        assert L.nvmlDeviceGetGpuInstanceRemainingCapacity(d, 0, ctypes.byref(left)) == 0 and left.value == 1
        assert L.nvmlDeviceCreateGpuInstance(d, 0, ctypes.byref(gi)) == 0           # 7g.80gb: the whole GPU
        for version, size in ((2, 136), (3, 140)):  # nvmlComputeInstanceProfileInfo_v2/_v3
            buf = (ctypes.c_uint * (size // 4))(size | version << 24)
            assert L.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 0, buf) == 0
            assert list(buf[1:5]) == [0, 1, 7, 16]  # 1c.7g.80gb: id 0, 1 slice, 7 of them, 16 SMs
            assert bytes(buf)[40:54] == b"MIG 1c.7g.80gb"
        assert L.nvmlDeviceCreateGpuInstance(d, 19, ctypes.byref(gi)) == 23         # INSUFFICIENT_RESOURCES
        assert L.nvmlDeviceGetGpuInstanceRemainingCapacity(d, 19, ctypes.byref(left)) == 0
        assert left.value == 0
        assert L.nvmlDeviceCreateGpuInstance(d, 77, ctypes.byref(gi)) == 2          # no such profile
        os.setresuid(65534, 65534, 65534)
        assert L.nvmlGpuInstanceDestroy(gi) == 4                                    # NO_PERMISSION
    """)
    p = subprocess.run([sys.executable, "-c", body], env=nvml_env(lib_dir, st), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr


def test_profile_info_by_id_and_the_legacy_compute_instance_info(lib_dir, state_file):
    """``…ProfileInfoByIdV`` takes the profile id (nvml.h); the pre-_v2 ``nvmlComputeInstanceGetInfo`` export
    fills a struct that ends before ``placement``, so it must not write past ``profileId``."""
    st = state_file("h100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    body = textwrap.dedent("""
        import ctypes
        L = ctypes.CDLL("libnvidia-ml.so.1"); assert L.nvmlInit_v2() == 0
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
        for version, size in ((2, 152), (3, 152)):  # nvmlGpuInstanceProfileInfo_v2/_v3 (same size)
            by_id = (ctypes.c_uint * (size // 4))(size | version << 24)
            by_index = (ctypes.c_uint * (size // 4))(size | version << 24)
            assert L.nvmlDeviceGetGpuInstanceProfileInfoByIdV(d, 9, by_id) == 0          # 3g.40gb's id
            assert L.nvmlDeviceGetGpuInstanceProfileInfoV(d, 2, by_index) == 0           # NVML_..._3_SLICE
            assert bytes(by_id) == bytes(by_index) and by_id[1] == 9
        assert L.nvmlDeviceGetGpuInstanceProfileInfoByIdV(d, 77, by_id) == 2                # no such id
        by_id[0] = 152 | 9 << 24
        assert L.nvmlDeviceGetGpuInstanceProfileInfoByIdV(d, 9, by_id) == 25                # VERSION_MISMATCH
        gi, ci = ctypes.c_void_p(), ctypes.c_void_p()
        assert L.nvmlDeviceCreateGpuInstance(d, 9, ctypes.byref(gi)) == 0
        assert L.nvmlGpuInstanceCreateComputeInstance(gi, 2, ctypes.byref(ci)) == 0         # 3c.3g.40gb
        full = (ctypes.c_uint * 10)(*[0xAAAAAAAA] * 10)
        legacy = (ctypes.c_uint * 10)(*[0xAAAAAAAA] * 10)
        assert L.nvmlComputeInstanceGetInfo_v2(ci, full) == 0
        assert L.nvmlComputeInstanceGetInfo(ci, legacy) == 0
        assert list(legacy[:6]) == list(full[:6])            # device, gpuInstance (pointers), id, profileId
        assert list(full[6:8]) == [0, 3] and list(legacy[6:]) == [0xAAAAAAAA] * 4
    """)
    p = subprocess.run([sys.executable, "-c", body], env=nvml_env(lib_dir, st), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr


def test_concurrent_creators_each_get_their_own_instance(lib_dir, state_file):
    st = state_file("h100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    create = textwrap.dedent("""
        import ctypes
        L = ctypes.CDLL("libnvidia-ml.so.1"); assert L.nvmlInit_v2() == 0
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
        assert L.nvmlDeviceCreateGpuInstance(d, 19, ctypes.byref(ctypes.c_void_p())) == 0
    """)
    workers = [subprocess.Popen([sys.executable, "-c", create], env=nvml_env(lib_dir, st)) for _ in range(7)]
    assert [w.wait(timeout=120) for w in workers] == [0] * 7
    record = Path(st).with_suffix(".settings").read_text()
    triples = re.search(r"^device\.0\.mig\.gpu_instances=(.*)$", record, re.M)[1].split(",")
    ids = sorted(int(i) for i in triples[0::3])
    starts = sorted(int(s) for s in triples[2::3])
    assert ids == list(range(7, 14)) and starts == list(range(7))  # the 1-slice ids real drivers use: 7 + start


def test_a_new_instance_reaches_a_running_reader(lib_dir, state_file):
    """A reader that keeps its NVML open sees each instance another process creates (the 5 ms target is
    measured by `tox -e bench`; here only that it arrives, not how fast)."""
    st = state_file("h100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    p = subprocess.run([sys.executable, "-c", MIG_READER, "7", "2.0"], env=nvml_env(lib_dir, st),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 7


#: `nvidia-smi mig -cgi ...` on an empty A100-SXM4-40GB and the GPU instance ids the real driver gives, in order:
#: NVIDIA's MIG user guide ("Instance Geometry" examples 1-3, and its note that 3g.20gb must come first) and real
#: boards' seven 1g (13, 11, 12, 7, 8, 9, 10) and three 2g (5, 3, 4).
GUIDE_GEOMETRIES = [("19,14,5", [13, 5, 1]), ("9,19,14,19", [2, 7, 4, 8]), ("14,19,19,19,19,19", [5, 13, 7, 8, 9, 10]),
                    ("19,19,19,19,19,19,19", [13, 11, 12, 7, 8, 9, 10]), ("14,14,14,20", [5, 3, 4, 13]),
                    ("9,9", [2, 1])]


@pytest.mark.parametrize("profiles,ids", GUIDE_GEOMETRIES)
def test_the_driver_places_instances_as_the_mig_user_guide_shows(smi, lib_dir, state_file, profiles, ids):
    state = state_file("a100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    done = subprocess.run([str(smi), "mig", "-cgi", profiles], env=nvml_env(lib_dir, state), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    made = re.findall(r"^Successfully created GPU instance ID +(\d+) on GPU +0 using profile MIG \S+ \(ID +(\d+)\)$",
                      done.stdout, re.M)
    assert [(int(gi), int(profile)) for gi, profile in made] == \
        list(zip(ids, map(int, profiles.split(",")), strict=True))


def test_the_guide_geometry_that_needs_the_3g_first_is_refused(smi, lib_dir, state_file):
    state = state_file("a100", n=1, overrides={"device.0.mig.current": 1, "device.0.mig.pending": 1})
    env = nvml_env(lib_dir, state)
    done = subprocess.run([str(smi), "mig", "-cgi", "19,19,14,9"], env=env, capture_output=True, text=True, timeout=60)
    assert re.findall(r"created GPU instance ID +(\d+)", done.stdout) == ["13", "11", "3"], done.stdout
    assert "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources" in done.stdout
    listed = subprocess.run([str(smi), "mig", "-lgi"], env=env, capture_output=True, text=True, timeout=60).stdout
    rows = re.findall(r"^\|\s+0\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d):(\d)\s+\|$", listed, re.M)
    assert rows == [("1g.5gb", "19", "11", "4", "1"), ("1g.5gb", "19", "13", "6", "1"),
                    ("2g.10gb", "14", "3", "0", "2")], listed
