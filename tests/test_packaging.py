"""What pyproject.toml promises about dependencies holds: the core needs only what the library imports, the
bounds the README states are the declared ones, and the lock files were made from these ranges."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# distribution → the module the library imports it as
MODULES = {
    "scikit-learn": "sklearn",
    "nvidia-ml-py": "pynvml",
    "numba-cuda": "numba.cuda",
    "jupyter-client": "jupyter_client",
}
# needed although nothing imports them by name, and why
NOT_IMPORTED = {
    "anywidget": "plotly's FigureWidget is an anywidget (plotly does not require it)",
    "ipykernel": "the kernelspec runs ipykernel_launcher; widgets/_kernel.py reads its kernel",
}


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()


def _imported_modules() -> set[str]:
    source = "\n".join(p.read_text() for p in (REPO / "workbench").rglob("*.py"))
    return set(re.findall(r"^\s*(?:from|import) ([A-Za-z_][\w.]*)", source, flags=re.M))


def test_every_core_dependency_is_imported_by_the_library_or_says_why_not():
    imported = _imported_modules()
    for requirement in PROJECT["dependencies"]:
        name = _name(requirement)
        module = MODULES.get(name, name.replace("-", "_"))
        if name in NOT_IMPORTED:
            assert not any(m == module or m.startswith(f"{module}.") for m in imported), name
            continue
        assert any(m == module or m.startswith(f"{module}.") for m in imported), f"{name} is never imported"


def test_jupyterlab_is_an_extra_not_a_core_dependency():
    assert not [r for r in PROJECT["dependencies"] if _name(r) == "jupyterlab"]
    assert [_name(r) for r in PROJECT["optional-dependencies"]["lab"]] == ["jupyterlab"]


@pytest.mark.parametrize(
    ("name", "bound"),
    [("plotly", "<8"), ("anywidget", "<0.12"), ("ipykernel", "<8"), ("numba-cuda", "<0.31")],
)
def test_what_we_read_the_internals_of_has_an_upper_bound(name, bound):
    [requirement] = [r for r in PROJECT["dependencies"] if _name(r) == name]
    assert bound in requirement


def _pins(lock: str) -> dict[str, str]:
    """``name → version`` of a lock file, after checking that every pin carries at least one hash."""
    text = (REPO / "requirements" / lock).read_text()
    pins = re.findall(r"^([a-z0-9_.\-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}", text, flags=re.M)
    assert len(pins) == len(re.findall(r"^[a-z0-9]", text, flags=re.M)), f"{lock}: a pin without a hash"
    return dict(pins)


@pytest.mark.parametrize("lock", ["lock.txt", "lowest.txt"])
def test_the_lock_files_pin_with_hashes_and_leave_torch_to_the_pin(lock):
    pins = _pins(lock)
    assert (
        "torch" not in pins
    )  # installed first from constraints.txt: the CPU build here, the user's elsewhere
    # what torch's CUDA build brings (the toolchain extra's nvidia-cuda-nvcc & co. are wanted)
    cuda_torch = ("nvidia-cublas", "nvidia-cudnn", "nvidia-nccl", "nvidia-cufft", "nvidia-cusparse", "triton")
    assert not [n for n in pins if n.startswith(cuda_torch)]
    for requirement in PROJECT["dependencies"]:
        if _name(requirement) != "torch":
            assert _name(requirement) in pins, f"{lock} lacks {requirement}: run make lock"


def test_the_lowest_lock_holds_each_lower_bound():
    """make test-lowest tests the lower bounds as declared (to their stated precision: >=12 may be 12.535),
    not versions that another package forces up."""
    from packaging.version import Version

    pins = _pins("lowest.txt")
    for requirement in PROJECT["dependencies"]:
        lower = re.search(r">=([\w.]+)", requirement)
        if _name(requirement) != "torch" and lower:
            bound = Version(lower.group(1)).release
            assert Version(pins[_name(requirement)]).release[: len(bound)] == bound, (
                requirement,
                pins[_name(requirement)],
            )
