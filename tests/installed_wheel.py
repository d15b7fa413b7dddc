"""The built wheel, installed as a user installs it: into a fresh venv outside the repository.

`installed_wheel` (a session fixture, see tests/conftest.py) builds the wheel from this checkout, makes a
venv in a temporary folder with the interpreter that made this one, installs torch from the pin and then
the wheel with its ``lab`` extra as the README says (its dependencies at the versions of
requirements/lock.txt, so the test does not drift), plus pytest and nbval for the notebook check. Commands
then run from a folder outside the repository, with a HOME of their own and nothing of this checkout on
their path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    home: Path  # HOME for every command: `--user` installs land here, not in the real home
    workdir: Path  # the folder commands run in, outside the repository

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """This machine's environment as a user's shell in the venv would have it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))}
        env.update(
            HOME=str(self.home),
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.venv),
            **extra,
        )
        return env

    def run(self, *argv: str | Path, timeout: float = 600, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=self.workdir,
            env=self.env(**extra_env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def locked_versions(lock: Path = REPO / "requirements" / "lock.txt") -> str:
    """The lock's ``name==version`` lines without hashes: pip constraints for the wheel's dependencies."""
    return "".join(
        f"{match.group(1)}\n"
        for match in re.finditer(r"^([A-Za-z0-9_.\-]+==[^\s\\;]+)", lock.read_text(), flags=re.M)
    )


def install_wheel(root: Path) -> InstalledWheel:
    """Build the wheel into ``root`` and install it into a fresh venv there (see the module docstring)."""
    dist, venv, home, workdir = root / "dist", root / "venv", root / "home", root / "user"
    for folder in (home, workdir):
        folder.mkdir()
    _check(
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
            capture_output=True,
            text=True,
        ),
        "building the wheel",
    )
    [wheel] = dist.glob("*.whl")
    _check(
        subprocess.run([sys._base_executable, "-m", "venv", str(venv)], capture_output=True, text=True),
        "making the venv",
    )
    constraints = root / "constraints.txt"
    constraints.write_text((REPO / "constraints.txt").read_text() + locked_versions())
    installed = InstalledWheel(wheel=wheel, venv=venv, home=home, workdir=workdir)
    # --no-compile: Python compiles what the commands import, on first use; pip compiling every module of
    # torch, jupyterlab & co. up front took ~50 s of the suite (2 cores, 2026-11-28: the wheel's tests
    # 161-188 s with it off, 223-232 s on, alternating)
    pip = [installed.python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", constraints]
    _check(installed.run(*pip, "torch"), "installing torch from the pin")
    _check(installed.run(*pip, f"{wheel}[lab]", "pytest", "nbval"), "installing the wheel")
    return installed


def _check(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        raise AssertionError(
            f"{what} failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
