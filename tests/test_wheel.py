"""The wheel as a user meets it: built from this checkout, installed into a fresh venv outside the
repository (tests/installed_wheel.py), every command run from another folder with a HOME of its own.

The README's example runs there too (tests/test_readme.py uses the same venv).
"""

from __future__ import annotations

import json
import re
import zipfile

from tests.installed_wheel import REPO

NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


def test_the_wheel_carries_the_kernelspec_tutorials_license_and_types(installed_wheel):
    names = zipfile.ZipFile(installed_wheel.wheel).namelist()
    data = "gpu_training_workbench-0.1.0.data/data/share/jupyter/kernels/workbench/"
    assert {f"{data}kernel.json", f"{data}logo-64x64.png"} <= set(names)
    assert {f"workbench/resources/tutorials/{name}" for name in NOTEBOOKS} <= set(names)
    assert "workbench/py.typed" in names
    assert "gpu_training_workbench-0.1.0.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "kernels/"))]


def test_installing_the_wheel_registers_the_kernel_and_prints_the_version(installed_wheel):
    done = installed_wheel.run("workbench", "--version")
    assert (done.returncode, done.stdout) == (0, "workbench 0.1.0\n"), done.stderr
    done = installed_wheel.run("jupyter-kernelspec", "list", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["kernelspecs"]["workbench"]
    assert found["resource_dir"] == str(installed_wheel.venv / "share" / "jupyter" / "kernels" / "workbench")
    assert found["spec"]["env"] == {"MALLOC_TOP_PAD_": "268435456"}


def test_kernel_install_user_then_the_tour_runs_on_it_under_nbval(installed_wheel):
    done = installed_wheel.run("workbench", "kernel", "install", "--user")
    assert done.returncode == 0, done.stderr
    user_spec = (
        installed_wheel.home / ".local" / "share" / "jupyter" / "kernels" / "workbench" / "kernel.json"
    )
    assert json.loads(user_spec.read_text())["argv"][0] == str(installed_wheel.python)

    done = installed_wheel.run("workbench", "tutorials")
    assert done.returncode == 0, done.stderr
    folder = installed_wheel.workdir / "workbench-tutorials"
    assert done.stdout.startswith(f"{len(NOTEBOOKS)} tutorial notebooks copied into {folder}\n"), done.stdout
    assert f"jupyter lab {folder}" in done.stdout
    assert "JupyterLab is not installed" not in done.stdout  # the [lab] extra brought it
    assert "workbench kernel install" not in done.stdout  # the kernel is registered
    assert sorted(p.name for p in folder.glob("*.ipynb")) == NOTEBOOKS

    # The tour on the kernel that --user installed (the user's directory first), at its CI size; its kernel
    # shows what reaches its stderr as a learner's does (the wheel's nbval plugin)
    done = installed_wheel.run(
        installed_wheel.python, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "-q",
        "-p", "workbench.bench.nbval_stderr", folder / "00_tour.ipynb", JUPYTER_PREFER_ENV_PATH="0",
        WORKBENCH_QUICK="1",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-500:]


def test_the_lab_extra_brings_jupyterlab_which_the_core_does_not_need(installed_wheel):
    done = installed_wheel.run("jupyter-lab", "--version")
    assert done.returncode == 0 and done.stdout.startswith("4."), done.stderr
    script = "import json, importlib.metadata as m; print(json.dumps(m.requires('gpu-training-workbench')))"
    requires = installed_wheel.run(installed_wheel.python, "-c", script)
    core = [r for r in json.loads(requires.stdout) if "extra ==" not in r]
    assert core and not [r for r in core if r.startswith("jupyterlab")], core


def test_tutorials_keep_a_learners_edits_unless_forced(installed_wheel):
    folder = installed_wheel.workdir / "mine"
    assert installed_wheel.run("workbench", "tutorials", folder).returncode == 0
    edited = folder / "02_optimizers.ipynb"
    edited.write_text(edited.read_text().replace("Optimizers", "My optimizers", 1))
    done = installed_wheel.run("workbench", "tutorials", folder)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("workbench tutorials: error: 02_optimizers.ipynb in ")
    assert "pass --force" in done.stderr
    assert "My optimizers" in edited.read_text()
    done = installed_wheel.run("workbench", "tutorials", folder, "--force")
    assert done.returncode == 0, done.stderr
    assert "02_optimizers.ipynb replaced: edited" in done.stdout
    assert edited.read_bytes() == (REPO / "notebooks" / "02_optimizers.ipynb").read_bytes()


def test_the_kernel_env_benchmark_reads_the_installed_kernelspec(installed_wheel):
    done = installed_wheel.run(
        installed_wheel.python,
        "-c",
        "from workbench.bench.kernel_env import kernel_environment as k; print(k())",
    )
    assert (done.returncode, done.stdout) == (0, "{'MALLOC_TOP_PAD_': '268435456'}\n"), done.stderr


def test_the_wheel_carries_every_stored_gpu_report_the_tutorials_show(installed_wheel):
    shown = set()
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        shown |= set(re.findall(r'stored_report\((?:\\"([\w-]+)\\")?\)', notebook.read_text()))
    gpus = sorted(name or "nvidia-h100-80gb-hbm3" for name in shown)  # stored_report()'s default
    assert "nvidia-h200" in gpus, gpus
    names = zipfile.ZipFile(installed_wheel.wheel).namelist()
    assert [gpu for gpu in gpus if f"workbench/resources/gpu/{gpu}.json" not in names] == []
    code = (
        "import sys; from workbench.bench.gpu_report import stored_report\n"
        "for gpu in sys.argv[1:]: print(stored_report(gpu).environment['gpu'])"
    )
    done = installed_wheel.run(installed_wheel.python, "-c", code, *gpus)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.splitlines()) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
