"""The pytest plugin as a user meets it: installed with mokka-core, ``mokka_node`` in a fresh test run."""

from __future__ import annotations

import textwrap

import pytest

from mokka_core.stage.native import native_dir
from mokka_core.testing import consumers

pytest_plugins = ["pytester"]
pytest.importorskip("pynvml")
if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)

# what the README promises, written only from it
README_TEST = '''
import subprocess

import pynvml
import pytest

from mokka_core import CtlError

NVIDIA_SMI = {smi!r}


def test_what_the_readme_promises(mokka_node):
    node = mokka_node(profile="h100")
    node.activate()
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8
    node.ctl("temp", "0", "91")
    gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(gpu0, pynvml.NVML_TEMPERATURE_GPU) == 91
    with pytest.raises(CtlError, match="9999"):
        node.ctl("temp", "0", "9999")
    node.ctl("fail", "3", "fallen-off-bus")
    gpu3 = pynvml.nvmlDeviceGetHandleByIndex(3)  # attached before it fell: its handle and identity stay
    assert pynvml.nvmlDeviceGetName(gpu3) == "NVIDIA H100 80GB HBM3"
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetTemperature(gpu3, pynvml.NVML_TEMPERATURE_GPU)
    assert pynvml.nvmlDeviceGetTemperature(gpu0, pynvml.NVML_TEMPERATURE_GPU) == 91

    t4, a100 = mokka_node(profile="t4", gpus=2), mokka_node(profile="a100")
    for node, count, name in ((t4, 2, "Tesla T4"), (a100, 8, "A100")):
        listed = subprocess.run([NVIDIA_SMI, "-L"], env=node.env, capture_output=True, text=True, check=True)
        gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
        assert len(gpus) == count and all(name in line for line in gpus), listed.stdout
'''


@pytest.mark.usefixtures("whole_node")
def test_the_readme_test_passes(pytester: pytest.Pytester) -> None:
    smi = consumers.require("nvidia-smi", version="550")
    pytester.makepyfile(README_TEST.format(smi=str(smi)))
    # a fresh interpreter, as a user's run: the plugin comes from the entry point, pynvml from the venv
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.usefixtures("whole_node")
def test_a_change_is_read_at_once_on_the_active_node(pytester: pytest.Pytester) -> None:
    """Node.ctl returns once this process's NVML has the change (the library's own check comes every few
    ms): every reading straight after it is the new one."""
    pytester.makepyfile(textwrap.dedent('''
        import pynvml

        def test_at_once(mokka_node):
            node = mokka_node(profile="h100", gpus=2)
            node.activate()
            pynvml.nvmlInit()
            gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
            for celsius in range(40, 90):
                node.ctl("temp", "1", str(celsius))
                assert pynvml.nvmlDeviceGetTemperature(gpu, pynvml.NVML_TEMPERATURE_GPU) == celsius
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_default_profile_comes_from_the_marker_else_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent('''
        import pytest

        def profile(node):
            return node.ctl("status", "--json").split('"profile": "')[1].split('"')[0]

        @pytest.mark.mokka_profile("a100")
        def test_marker(mokka_node):
            assert profile(mokka_node()) == "a100"

        def test_option(mokka_node):
            assert profile(mokka_node()) == "t4"

        def test_explicit(mokka_node):
            assert profile(mokka_node(profile="l40s", gpus=1)) == "l40s"
    '''))
    result = pytester.runpytest_subprocess("--mokka-profile", "t4", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_nodes_are_removed_after_the_test_even_when_it_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent('''
        ROOTS = []

        def test_fails(mokka_node):
            ROOTS.append(mokka_node(profile="t4").root)
            ROOTS.append(mokka_node(profile="t4", gpus=2).root)
            assert False

        def test_gone():
            assert len(ROOTS) == 2 and not any(root.parent.exists() for root in ROOTS)
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)


@pytest.mark.usefixtures("whole_node")
def test_a_second_active_node_is_refused_clearly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent('''
        import pytest
        import pynvml
        from mokka_core.errors import MokkaError

        def test_one_at_a_time(mokka_node):
            first, second = mokka_node(profile="t4"), mokka_node(profile="t4", gpus=2)
            first.activate()
            with pytest.raises(MokkaError, match="another node is active"):
                second.activate()
            pynvml.nvmlInit()
            assert pynvml.nvmlDeviceGetCount() == 1
            first.close()
            second.activate()  # the first is gone: the library follows the next one
            deadline = __import__("time").monotonic() + 1
            while pynvml.nvmlDeviceGetCount() != 2 and __import__("time").monotonic() < deadline:
                pass
            assert pynvml.nvmlDeviceGetCount() == 2
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_plugin_imports_nothing_heavy_until_a_node_is_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent('''
        import sys

        def test_light():
            assert "mokka_core.testing.pytest_plugin" in sys.modules
            assert not [name for name in ("pydantic", "yaml", "mokka_core.testing.node_api") if name in sys.modules]
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
