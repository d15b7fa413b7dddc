"""The fast input path's decisions, as far as a CPU can check them: which datasets move to the GPU whole,
what the DataLoader defaults are per device, and that on a CPU the batches pass through untouched."""

import pytest
import torch

from workbench.data import load_dataset
from workbench.data.device_feed import dataset_bytes, device_resident, fits_on_device, prefetch_to_device
from workbench.data.torch_loaders import LoaderConfig, default_workers
from workbench.train.batches import device_batches


@pytest.fixture
def gpu_with_free_bytes(monkeypatch):
    """torch.cuda.mem_get_info reporting `free` bytes of 80 GB (no GPU is touched)."""

    def patch(free: int) -> None:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * 2**30))

    return patch


def test_a_dataset_moves_to_the_gpu_when_it_takes_at_most_a_quarter_of_its_free_memory(gpu_with_free_bytes):
    digits = load_dataset("digits")
    size = dataset_bytes(digits)
    assert size == digits.features.numel() * 4 + digits.targets.numel() * 8
    gpu_with_free_bytes(4 * size)
    assert fits_on_device(size, torch.device("cuda", 0))
    gpu_with_free_bytes(4 * size - 1)
    assert not fits_on_device(size, torch.device("cuda", 0))
    assert not fits_on_device(1, torch.device("cpu"))  # on a CPU there is nothing to move


def test_on_a_cpu_datasets_and_batches_stay_as_they_are():
    digits = load_dataset("digits")
    assert device_resident(digits, torch.device("cpu")) is digits
    batches = [(torch.randn(4, 3), torch.arange(4)) for _ in range(3)]
    passed = list(prefetch_to_device(iter(batches), torch.device("cpu")))
    assert all(a is b for a, b in zip(passed, batches, strict=True))  # the same tensors: no copy
    assert list(device_batches(range(6), torch.device("cpu"), skip=4)) == [4, 5]  # a resume's skip


@pytest.mark.parametrize(
    ("device", "map_style", "cores", "gpus", "expected"),
    [
        ("cpu", True, 16, 0, 0),  # training uses the cores
        ("cuda", False, 16, 1, 0),  # an iterable dataset: each worker would read the whole stream
        ("cuda", True, 16, 1, 4),
        ("cuda", True, 16, 8, 1),
        ("cuda", True, 8, 8, 0),  # a core per GPU: its training process needs it
    ],
)
def test_dataloader_workers_are_chosen_by_device(device, map_style, cores, gpus, expected):
    assert default_workers(device, map_style=map_style, cpu_count=cores, gpus=gpus) == expected


def test_loader_options_follow_the_device_unless_given():
    auto = LoaderConfig()
    assert auto.options("cpu", map_style=True) == {"num_workers": 0, "pin_memory": False, "collate_fn": None}
    assert LoaderConfig(num_workers=3).options("cpu", map_style=True)["num_workers"] == 3
    with pytest.raises(ValueError, match=r"prefetch_factor=2 needs num_workers ≥ 1 \(got num_workers=None\)"):
        LoaderConfig(prefetch_factor=2)
