# Two commands on a fresh machine:
#   make lab    set up .venv, install the `workbench` kernelspec, open the tutorials in JupyterLab
#   make test   set up .venv and run every test and notebook (ruff, import layers, pytest, nbval)
#   (also: make install, lint, clean, and screenshots: the README's tour pictures from the browser test)
#
# Knobs (make VAR=value ...):
#   PYTHON       interpreter that creates .venv                     (python3)
#   CONSTRAINTS  pip constraints file that pins torch; empty = no pin (constraints.txt)
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

BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PIN := $(if $(strip $(CONSTRAINTS)),-c $(CONSTRAINTS))
STAMP := $(VENV)/.installed
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

.PHONY: lab test install lint screenshots system clean

lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) $(AS_ROOT) $(LAB_ARGS)

# compileall: the suite starts hundreds of Python processes (workers, ranks, the CLI, kernels); with bytecode
# writing off (PYTHONDONTWRITEBYTECODE, as on some CI images) each would compile workbench from source again.
test: $(STAMP) system
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q workbench tests conftest.py
	$(BIN)/python -m pytest --nbval-lax --doctest-modules --durations=25 $(PYTEST_ARGS) tests workbench notebooks

install: $(STAMP)

# The README's tour pictures: the browser test runs the notebooks and crops their dashboards.
TOUR := 02_optimizers_dashboard.png 03_data_parallel_dashboard.png 04_model_parallel_dashboard.png
screenshots: $(STAMP) system
	$(BIN)/python -m pytest tests/browser -k "02_optimizers or 03_data_parallel or 04_model_parallel"
	mkdir -p docs/tour && cd artifacts/browser && cp $(TOUR) ../../docs/tour/

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# torch first, from the pin, so that resolving the project never pulls a CUDA build on a CPU machine.
$(STAMP): pyproject.toml $(CONSTRAINTS) kernels/workbench/kernel.json workbench/kernelspec.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(PIN) torch
	$(PIP) install --quiet $(PIN) -e '.[test,dev,toolchain,tensorboard,mlflow,spark,peers]'
	$(BIN)/workbench kernel install --sys-prefix
	touch $@

# Debian packages the tests drive, each named by the program it provides; whatever is missing is installed in
# one apt-get call. Chromium: the Playwright browser tests (never `playwright install`: no downloads at test
# time). Open MPI: the tests under a real `mpirun` (torch's wheel has no MPI backend: the ranks read Open
# MPI's variables and talk through gloo). Java 17+: Spark's JVM. Slurm and munge: the tests that start a
# one-node Slurm cluster (srun, the README's sbatch script).
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
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
