"""The `workbench` kernel imports the tutorials' modules while it waits, on its thread, until a cell runs."""

import json
import logging
import time

import psutil

from workbench.kernel_preload import DELAY_S, PRELOADED, SWITCH, Preloader
from workbench.kernelspec import KERNEL_NAME, install_kernelspec


class Turns:
    """The kernel's event loop, by hand: `schedule` queues a call, `run` makes the queued calls in turn."""

    def __init__(self) -> None:
        self.queued: list = []

    def schedule(self, call) -> None:
        self.queued.append(call)

    def run(self, turns: int = 100) -> None:
        while self.queued and turns:
            self.queued.pop(0)()
            turns -= 1


def test_imports_one_module_per_turn_in_order():
    turns = Turns()
    preloader = Preloader(["json", "csv", "fractions"], turns.schedule)
    preloader.start()
    turns.run(turns=2)
    assert preloader.imported == ["json", "csv"]
    turns.run()
    assert preloader.imported == ["json", "csv", "fractions"] and not turns.queued


def test_a_cell_that_starts_stops_the_imports_for_good():
    turns = Turns()
    preloader = Preloader(["json", "csv", "fractions"], turns.schedule)
    preloader.start()
    turns.run(turns=1)
    preloader.cell_started()
    turns.run()
    assert preloader.imported == ["json"]
    preloader.start()  # as a later turn would: nothing left
    assert not turns.queued


def test_a_module_that_fails_to_import_stops_the_rest_and_says_which_in_the_log(caplog):
    turns = Turns()
    preloader = Preloader(["json", "workbench_no_such_module", "csv"], turns.schedule)
    preloader.start()
    with caplog.at_level(logging.WARNING, logger="workbench.kernel_preload"):
        turns.run()
    assert preloader.imported == ["json"]
    assert "not imported ahead: workbench_no_such_module (ModuleNotFoundError" in caplog.text


def test_the_preloaded_modules_exist_and_leave_numba_to_the_notebook():
    """numba reads NUMBA_ENABLE_CUDASIM when numba.cuda is imported: a cell must still be able to choose."""
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in PRELOADED)
    assert not [name for name in PRELOADED if name.split(".")[0] == "numba"]


def _quiet(process: psutil.Process, timeout_s: float, quiet_s: float) -> None:
    """Until `process` used no CPU for `quiet_s` seconds (its start and its imports done)."""
    deadline, used, since = time.monotonic() + timeout_s, -1.0, time.monotonic()
    while time.monotonic() < deadline:
        now = sum(process.cpu_times()[:2])
        if now - used > 0.05:
            used, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)
    raise TimeoutError(f"the kernel (pid {process.pid}) kept busy for {timeout_s} s")


def test_the_installed_kernel_imports_ahead_and_the_switch_turns_it_off(tmp_path):
    """Two kernels from the installed spec, one with WORKBENCH_PRELOAD=0; once each is quiet, a cell lists
    which of the preloaded modules it finds imported (the cell itself imports none of them)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    path = install_kernelspec(prefix=str(tmp_path))
    specs = KernelSpecManager(kernel_dirs=[str(path.parent)])
    managers = {on: KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs) for on in (True, False)}
    clients = {}
    try:
        for on, manager in managers.items():
            manager.start_kernel(env={**manager.kernel_spec.env, SWITCH: "1" if on else "0"})
            clients[on] = manager.client()
            clients[on].start_channels()
        for on, manager in managers.items():
            clients[on].wait_for_ready(timeout=60)
            # the imports begin DELAY_S after the start and follow one another within milliseconds
            _quiet(psutil.Process(manager.provisioner.process.pid), timeout_s=180, quiet_s=DELAY_S + 2.0)
        found = {}
        for on, client in clients.items():
            lines = []
            code = (
                f"import sys, json; print(json.dumps([m for m in {list(PRELOADED)!r} if m in sys.modules]))"
            )
            reply = client.execute_interactive(
                code,
                timeout=60,
                output_hook=lambda msg, lines=lines: lines.append(msg["content"].get("text", "")),
            )
            assert reply["content"]["status"] == "ok"
            found[on] = json.loads("".join(lines))
    finally:
        for on, manager in managers.items():
            if on in clients:
                clients[on].stop_channels()
            manager.shutdown_kernel(now=True)
    assert found[True] == list(PRELOADED)
    assert "plotly.express" not in found[False] and "torch._dynamo" not in found[False]


def test_the_switch_off_imports_nothing_and_registers_no_hook(monkeypatch):
    from workbench import kernel_preload

    class Shell:
        kernel = object()
        events = None  # registering a hook would fail: the switch returns first

    monkeypatch.setenv(SWITCH, "0")
    assert kernel_preload.load_ipython_extension(Shell()) is None
