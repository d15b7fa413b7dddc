# Two commands on a fresh machine:
#   make lab    set up .venv, install the `workbench` kernelspec, open the tutorials in JupyterLab
#   make test   set up .venv from the lock file and run every test and notebook (ruff, import layers,
#               pytest, Run All of each notebook in JupyterLab, the built wheel in a venv of its own)
#   (also: make install, lint, clean, lock, test-lowest, screenshots: the tour pictures (README, docs/tour.md),
#   figures: pictures of each notebook's plots in its outputs (GitHub, nbviewer), and
#   gpu-wheels / gpu-check: the offline GPU check, below)
#
# make test installs exactly requirements/lock.txt (hashed); make lab resolves the project's ranges as a
# user's pip would, unless LOCKED=1. make lock refreshes the lock files; make test-lowest installs the
# lowest versions pyproject.toml allows (requirements/lowest.txt) into .venv-lowest and runs the widget,
# kernelspec and kernel tests there (CI runs it after make test).
#
# Knobs (make VAR=value ...):
#   PYTHON       interpreter that creates .venv                     (python3)
#   CONSTRAINTS  pip constraints file that pins torch; empty = no pin (constraints.txt)
#   LOCKED       1: make lab/install take the lock file too          (empty)
#   TORCH_CPU_WHEELS  where make lock finds torch's CPU wheel: a folder or a page of links (pip's
#                find-links where set, else PyTorch's CPU wheel page); the lock holds torch's dependencies
#                as the CPU build has them (no CUDA packages), not torch itself
#   HOST, PORT   where JupyterLab listens; the token stays on      (127.0.0.1, 8888)
#   LAB_ARGS     extra arguments for `jupyter lab`, e.g. --no-browser
#   PYTEST_ARGS  extra arguments for pytest, e.g. -k data
#   CHROMIUM     the browser the notebook browser test drives       (/usr/bin/chromium; apt installs it)
#   MPIRUN       Open MPI's launcher the mpirun tests start          (/usr/bin/mpirun; apt installs it)
#   JAVA         the JVM Spark's tests run on, 17 or newer           (/usr/bin/java; apt installs it)
#   SLURMD       Slurm's node daemon the one-node Slurm tests start  (/usr/sbin/slurmd; apt installs it)

PYTHON ?= python3
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
HOST ?= 127.0.0.1
PORT ?= 8888
LAB_ARGS ?=
PYTEST_ARGS ?=
CHROMIUM ?= /usr/bin/chromium
MPIRUN ?= /usr/bin/mpirun
JAVA ?= /usr/bin/java
SLURMD ?= /usr/sbin/slurmd

LOCKED ?=
LOCK := requirements/lock.txt
LOWEST := requirements/lowest.txt
TORCH_CPU_WHEELS ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/cpu/torch/)
# Every extra: make test exercises them all (lab: JupyterLab for the browser and lab tests).
EXTRAS := lab,test,dev,toolchain,tensorboard,mlflow,spark,peers

BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PIN := $(if $(strip $(CONSTRAINTS)),-c $(CONSTRAINTS))
LOCKED_STAMP := $(VENV)/.installed-locked
RESOLVED_STAMP := $(VENV)/.installed-resolved
# make lab keeps a .venv that make test installed from the lock (it would resolve the same ranges again).
STAMP := $(if $(strip $(LOCKED))$(wildcard $(LOCKED_STAMP)),$(LOCKED_STAMP),$(RESOLVED_STAMP))
KERNELSPEC := workbench/resources/kernelspec/kernel.json workbench/kernelspec.py
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# JupyterLab and nbval find the `workbench` kernel of this .venv before any user-wide one of that name.
export JUPYTER_PREFER_ENV_PATH := 1
# The browser test fails (instead of skipping) when the browser is missing under `make test`; so do the
# kernel compile checks without NVIDIA's pip toolchain (the `toolchain` extra installed below).
export WORKBENCH_CHROMIUM := $(CHROMIUM)
export WORKBENCH_REQUIRE_TOOLCHAIN := 1
export WORKBENCH_REQUIRE_MPIRUN := 1
export WORKBENCH_REQUIRE_SLURM := 1

.PHONY: lab test test-lowest install lint lock screenshots figures system clean gpu-wheels gpu-check

comma := ,

lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) $(AS_ROOT) $(LAB_ARGS)

# compileall: the suite starts hundreds of Python processes (workers, ranks, the CLI, kernels); with bytecode
# writing off (PYTHONDONTWRITEBYTECODE, as on some CI images) each would compile workbench from source again.
# The notebooks run once: tests/browser/test_notebook_in_browser.py presses Run All in JupyterLab with the
# exercises' stubs, then runs the answers in the same page and compares the checked cells as nbval would;
# tests/test_wheel.py runs the tour under nbval on the installed wheel's kernel.
test: $(LOCKED_STAMP) system
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q workbench tests conftest.py
	$(BIN)/python -m pytest --doctest-modules --durations=25 $(PYTEST_ARGS) tests workbench

install: $(STAMP)

# The tour pictures (README, docs/tour.md): the browser test runs the notebooks and crops their dashboards.
TOUR := 02_optimizers_dashboard.png 03_data_parallel_dashboard.png 04b_model_parallel_dashboard.png
screenshots: $(STAMP) system
	$(BIN)/python -m pytest tests/browser -k "02_optimizers or 03_data_parallel or 04b_model_parallel"
	mkdir -p docs/tour && cd artifacts/browser && cp $(TOUR) ../../docs/tour/

# Pictures of every notebook's plots, stored in its outputs for GitHub and nbviewer (tests/browser/stored_figures.py)
figures: $(STAMP) system
	WORKBENCH_STORE_FIGURES=1 $(BIN)/python -m pytest tests/browser/test_notebook_in_browser.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# torch first, from the pin, so that resolving the project never pulls a CUDA build on a CPU machine.
# Locked: every other package from the hashed lock (pip refuses any file whose hash differs, and any
# dependency the lock lacks), then the project itself without resolving anything.
$(LOCKED_STAMP): pyproject.toml $(CONSTRAINTS) $(LOCK) $(KERNELSPEC)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(PIN) torch
	$(PIP) install --quiet --require-hashes -r $(LOCK)
	$(PIP) install --quiet --no-deps -e .
	$(PIP) check
	$(BIN)/workbench kernel install --sys-prefix
	rm -f $(RESOLVED_STAMP) && touch $@

$(RESOLVED_STAMP): pyproject.toml $(CONSTRAINTS) $(KERNELSPEC)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(PIN) torch
	$(PIP) install --quiet $(PIN) -e '.[$(EXTRAS)]'
	$(BIN)/workbench kernel install --sys-prefix
	rm -f $(LOCKED_STAMP) && touch $@

# Both lock files from pyproject.toml and the torch pin, resolved against torch's CPU wheel (the pin with
# +cpu: `==2.13.0` alone lets --resolution lowest-direct take the index's CUDA build, which sorts lower).
TORCH_CPU_PIN := $(VENV)/torch-cpu-pin.txt
UV_COMPILE = $(BIN)/uv pip compile pyproject.toml --quiet --python $(BIN)/python -c $(TORCH_CPU_PIN) \
	--generate-hashes --find-links $(TORCH_CPU_WHEELS) --no-emit-package torch --custom-compile-command 'make lock'
lock: $(STAMP)
	sed -n 's/^torch==\([0-9.]*\)$$/torch==\1+cpu/p' $(CONSTRAINTS) > $(TORCH_CPU_PIN)
	grep -q . $(TORCH_CPU_PIN) || { echo "make lock: $(CONSTRAINTS) pins no torch==X.Y.Z" >&2; exit 1; }
	$(UV_COMPILE) $(foreach extra,$(subst $(comma), ,$(EXTRAS)),--extra $(extra)) -o $(LOCK)
	$(UV_COMPILE) --extra test --extra toolchain --resolution lowest-direct -o $(LOWEST)

# The lowest allowed versions of every direct dependency (torch stays at the pin: the index has no older
# CPU build), in a venv of their own, on the tests of what their bounds protect: the widgets (plotly,
# anywidget, ipywidgets), the kernelspec, its preloading and the kernel's dispatch (ipykernel,
# jupyter-client) and the numba kernels in the simulator (numba, numba-cuda).
LOWEST_VENV := .venv-lowest
LOWEST_TESTS := tests/widgets tests/test_kernelspec.py tests/test_kernel_preload.py tests/kernels
test-lowest: $(LOWEST) $(CONSTRAINTS)
	rm -rf $(LOWEST_VENV) && $(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install --quiet $(PIN) torch
	$(LOWEST_VENV)/bin/python -m pip install --quiet --require-hashes -r $(LOWEST)
	$(LOWEST_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(LOWEST_VENV)/bin/python -m pip check
	$(LOWEST_VENV)/bin/workbench kernel install --sys-prefix
	$(LOWEST_VENV)/bin/python -m pip list --format freeze | grep -iE '^(plotly|anywidget|ipykernel|ipywidgets|jupyter.client|numba|numba.cuda|numpy)=='
	$(LOWEST_VENV)/bin/python -m pytest -p no:cacheprovider $(LOWEST_TESTS)

# The GPU check (workbench/bench/gpu_check.py), for a machine with one NVIDIA GPU and no network.
# Here (with an index): make gpu-wheels fills $(GPU_WHEELS) with every wheel workbench and the check need for
# CPython 3.12 on manylinux, torch left out, and resolves them from the folder alone (it names a gap).
# There: make gpu-check PYTHON=<the python with the machine's CUDA torch> installs from the folder without
# an index and writes docs/gpu/<gpu>.md and .json (GPU_CHECK_ARGS: e.g. --budget 300, --out DIR, --plan).
GPU_WHEELS ?= .gpu-wheels
GPU_CHECK_ARGS ?=
gpu-wheels: $(STAMP)
	$(BIN)/python -m workbench.bench.gpu_wheels $(GPU_WHEELS)

gpu-check:
	$(PYTHON) -m pip install --quiet --no-index --find-links $(GPU_WHEELS) -e .
	WORKBENCH_REQUIRE_TOOLCHAIN= $(PYTHON) -m workbench gpu-check $(GPU_CHECK_ARGS)

# Debian packages the tests drive, each named by the program it provides; whatever is missing is installed in
# one apt-get call. Chromium: the Playwright browser tests (never `playwright install`: no downloads at test
# time). Open MPI: the tests under a real `mpirun` (torch's wheel has no MPI backend: the ranks read Open
# MPI's variables and talk through gloo). Java 17+: Spark's JVM. Slurm and munge: the tests that start a
# one-node Slurm cluster (srun, the sbatch script of docs/scaling-out.md).
SYSTEM := $(CHROMIUM):chromium $(MPIRUN):openmpi-bin $(JAVA):openjdk-17-jre-headless $(SLURMD):slurm-wlm,munge

system:
	@missing=; for entry in $(SYSTEM); do test -x "$${entry%%:*}" || missing="$$missing $$(echo "$${entry#*:}" | tr , ' ')"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	  else echo "missing Debian packages:$$missing (apt-get install$$missing)" >&2; exit 1; fi; \
	  echo "apt-get install$$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi; \
	for entry in $(SYSTEM); do test -x "$${entry%%:*}" || { echo "$${entry%%:*} is still missing" >&2; exit 1; }; done

clean:
	rm -rf $(VENV) $(LOWEST_VENV) .pytest_cache .ruff_cache *.egg-info
