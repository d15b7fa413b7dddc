import json
import subprocess
import sys

import pytest

from workbench.devices import choose_numba_backend, cuda_driver_found, cuda_status
from workbench.devices import cuda as cuda_module


def test_auto_picks_the_simulator_without_a_driver_and_the_gpu_with_one():
    assert choose_numba_backend({}, driver_found=False).simulator is True
    assert choose_numba_backend({}, driver_found=True).simulator is False
    assert "auto: no CUDA driver found" in choose_numba_backend({}, driver_found=False).reason


@pytest.mark.parametrize(("value", "simulator"), [("1", True), ("0", False), (" 1 ", True)])
def test_an_explicit_variable_wins_over_auto(value, simulator):
    for driver in (True, False):
        backend = choose_numba_backend({"NUMBA_ENABLE_CUDASIM": value}, driver_found=driver)
        assert backend.simulator is simulator and "set by NUMBA_ENABLE_CUDASIM" in backend.reason


def test_a_bad_variable_names_itself_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"NUMBA_ENABLE_CUDASIM='yes' is not supported; allowed values: '0'"):
        choose_numba_backend({"NUMBA_ENABLE_CUDASIM": "yes"})


def _run(code: str, **env) -> subprocess.CompletedProcess:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"} | env
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120
    )


def test_configure_numba_applies_the_auto_choice_before_numba_cuda_is_imported():
    code = (
        "import os, sys\n"
        "from workbench.devices import configure_numba, cuda_driver_found\n"
        "backend = configure_numba()\n"
        "from numba import cuda\n"
        "print(backend.simulator, bool(cuda.config.ENABLE_CUDASIM), cuda_driver_found(), "
        "os.environ['NUMBA_ENABLE_CUDASIM'])\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    simulator, loaded_simulator, driver, variable = done.stdout.split()
    assert simulator == loaded_simulator == str(driver == "False")
    assert variable == ("1" if simulator == "True" else "0")


@pytest.mark.parametrize("given, expected", [(None, "0"), ("1", "1")])
def test_configure_numba_turns_low_occupancy_warnings_off_unless_asked(given, expected):
    """The tutorials' small grids made numba warn on stderr at each launch (nbval failed on an H200)."""
    code = (
        "import os\n"
        + (f"os.environ['NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS'] = {given!r}\n" if given else "")
        + "from workbench.devices import configure_numba\n"
        "configure_numba()\n"
        "from numba.cuda.core import config\n"
        "print(os.environ['NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS'], config.CUDA_LOW_OCCUPANCY_WARNINGS)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected, expected]


def test_configure_numba_refuses_to_switch_after_numba_cuda_was_imported():
    code = (
        "from numba import cuda\n"
        "from workbench.devices import configure_numba\n"
        "assert configure_numba(simulator=True).simulator\n"  # the same backend: fine
        "configure_numba(simulator=False)\n"
    )
    done = _run(code, NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 1
    assert "numba.cuda was already imported on the simulator; the GPU was asked for" in done.stderr
    assert "restart the kernel" in done.stderr


def test_the_child_probe_answers_in_json():
    probe = cuda_module.probe_cuda_in_child(simulator=False)
    assert set(probe) == {"torch", "numba", "numba_error", "ptx_version", "kernel_error"}, probe
    if not cuda_driver_found():
        assert probe["torch"] == [] and probe["numba"] == []
    json.dumps(probe)


def test_status_without_a_driver_asks_no_child(monkeypatch):
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: False)
    monkeypatch.setattr(cuda_module, "probe_cuda_in_child", pytest.fail)
    status = cuda_status()
    assert not status.driver_found and not status.torch_available and status.torch_devices == ()


def test_status_with_a_driver_reports_what_the_child_saw(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: True)
    answer = {"torch": ["NVIDIA H100"], "numba": ["NVIDIA H100"], "numba_error": None}
    monkeypatch.setattr(cuda_module, "probe_cuda_in_child", lambda **_: answer)
    status = cuda_status()
    assert status.torch_available and status.numba_available and status.error is None
    assert status.numba_backend.simulator is False


def test_status_carries_the_probes_failure(monkeypatch):
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: True)
    monkeypatch.setattr(
        cuda_module, "probe_cuda_in_child", lambda **_: {"error": "CUDA probe failed (exit 1): boom"}
    )
    status = cuda_status()
    assert not status.torch_available and status.error == "CUDA probe failed (exit 1): boom"


def test_status_reports_a_bad_variable_instead_of_raising(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "yes")
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: False)
    status = cuda_status()
    assert "NUMBA_ENABLE_CUDASIM='yes' is not supported" in status.error
    assert status.numba_backend.simulator is False  # what numba itself does with an unparsable value


def test_a_forced_simulator_lists_no_numba_gpus(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: True)
    answer = {"torch": ["NVIDIA H100"], "numba": ["SIMULATOR"], "numba_error": None}
    monkeypatch.setattr(cuda_module, "probe_cuda_in_child", lambda **_: answer)
    status = cuda_status()
    assert status.numba_devices == () and status.numba_available and status.torch_available


def test_a_bad_variable_and_a_failed_probe_are_both_reported(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "yes")
    monkeypatch.setattr(cuda_module, "cuda_driver_found", lambda: True)
    monkeypatch.setattr(
        cuda_module, "probe_cuda_in_child", lambda **_: {"error": "CUDA probe failed (exit 1): boom"}
    )
    error = cuda_status().error
    assert "NUMBA_ENABLE_CUDASIM='yes' is not supported" in error and "boom" in error
