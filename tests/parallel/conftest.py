"""What the tests of launchers share: the tiny data-parallel job they all start (`torchrun_case.py`)."""

import importlib.util
from pathlib import Path

import pytest

TORCHRUN_CASE = Path(__file__).parent / "torchrun_case.py"


@pytest.fixture(scope="session")
def torchrun_case():
    """`torchrun_case.py` as a module: its `assert_ranks_match_reference(out, world_size)` checks a job."""
    spec = importlib.util.spec_from_file_location("torchrun_case", TORCHRUN_CASE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
