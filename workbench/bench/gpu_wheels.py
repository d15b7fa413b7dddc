"""The offline bundle for a GPU machine: every wheel workbench and its GPU check need, but torch.

    python -m workbench.bench.gpu_wheels .gpu-wheels            # download (here, with an index)
    python -m workbench.bench.gpu_wheels .gpu-wheels --check    # resolve from the folder alone: names a gap

GPU machines bring their own CUDA build of torch (a site install, or the one their driver needs), so the
bundle leaves torch out and installs against it: ``pip install --no-index --find-links .gpu-wheels -e .``
(what ``make gpu-check`` does). Wheels are for CPython 3.12 on manylinux x86-64 unless told otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from workbench._distribution import DISTRIBUTION

PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux2014_x86_64",
)
# what `workbench gpu-check` runs beyond the library (its tests), and what pip builds the checkout with:
# hatchling, and editables for an editable install (`pip install -e .` asks for it; without it, offline, the
# build fails: seen on the GPU machine, 2026-11-26)
CHECK_NEEDS = ("pytest>=8", "nbval>=0.11", "hatchling>=1.27", "editables~=0.3")
LEFT_TO_THE_SITE = ("torch",)  # the machine's own CUDA build


def requirements(distribution: str = DISTRIBUTION) -> list[str]:
    """The installed distribution's core requirements (no extras) without torch, plus what the check runs.

    Example:
        >>> names = [r.split(">")[0] for r in requirements()]
        >>> "numba" in names, "torch" in names
        (True, False)
    """
    found = []
    for line in importlib.metadata.requires(distribution) or []:
        if "extra ==" in line:
            continue
        name = re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].strip().lower()
        if name not in LEFT_TO_THE_SITE:
            found.append(line.split(";")[0].strip())
    return found + list(CHECK_NEEDS)


def pip_arguments(python_version: str) -> list[str]:
    """pip's options that pick wheels for `python_version` on manylinux x86-64 (binary only)."""
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", *platforms]


def download(folder: Path, python_version: str = "3.12") -> subprocess.CompletedProcess:
    """``pip download`` the bundle into `folder`."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "-d",
        str(folder),
        *pip_arguments(python_version),
    ]
    return subprocess.run([*command, *requirements()], capture_output=True, text=True)


def check(folder: Path, python_version: str = "3.12") -> subprocess.CompletedProcess:
    """Resolve the bundle from `folder` alone (no index), as the GPU machine will; pip names a gap.

    The wheels' tags already pick `python_version`; pip would also hold their Requires-Python against the
    Python running it, hence ``--ignore-requires-python``.
    """
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index"]
    command += ["--ignore-requires-python"]
    command += [
        "--find-links",
        str(folder),
        "--target",
        str(folder / ".resolve"),
        *pip_arguments(python_version),
    ]
    return subprocess.run([*command, *requirements()], capture_output=True, text=True)


def missing_wheel(pip_output: str) -> str | None:
    """The requirement pip could not find in the folder, from its error, or None.

    Example:
        >>> missing_wheel("ERROR: No matching distribution found for plotly<8,>=6")
        'plotly<8,>=6'
    """
    found = re.search(r"No matching distribution found for (\S+)", pip_output)
    return found.group(1) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.bench.gpu_wheels", description=__doc__.splitlines()[0]
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--check", action="store_true", help="only resolve from the folder (no index)")
    args = parser.parse_args(argv)
    if not args.check:
        args.folder.mkdir(parents=True, exist_ok=True)
        done = download(args.folder, args.python_version)
        if done.returncode != 0:
            print(f"gpu_wheels: pip download failed:\n{done.stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
    done = check(args.folder, args.python_version)
    if done.returncode != 0:
        gap = missing_wheel(done.stdout + done.stderr)
        what = f"no wheel for {gap}" if gap else (done.stdout + done.stderr).strip()[-1000:]
        print(f"gpu_wheels: the bundle in {args.folder} is incomplete: {what}", file=sys.stderr)
        return 1
    wheels = sorted(args.folder.glob("*.whl"))
    mib = sum(wheel.stat().st_size for wheel in wheels) / 2**20
    print(f"{len(wheels)} wheels, {mib:.1f} MiB in {args.folder}: complete for Python {args.python_version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
