"""Large tensors and arrays reach launch workers as one shared-memory copy, mapped copy-on-write: the
workers' pages are shared, a worker's write stays its own, and no file outlives the launch."""

import os
import pickle
import shutil
import time
from pathlib import Path

import numpy
import pytest
import torch

from workbench.parallel import launch
from workbench.parallel.launching import shared_arrays as sa
from workbench.parallel.launching.shared_arrays import SharedArrays, loads_sharing, pickle_sharing

MIB = 1 << 20


def _our_folders():
    return sorted(sa.shared_memory_root().glob(f"workbench-shared-{os.getpid()}-*"))


def _shared_kib(path_part: str) -> int:
    """Kibibytes of this process's mappings of files whose path contains `path_part` that another process
    maps too (smaps' Shared_Clean + Shared_Dirty)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = path_part in line
        elif inside and fields[0] in ("Shared_Clean:", "Shared_Dirty:"):
            total += int(fields[1])
    return total


def _touch_write_and_compare(strategy, images, table):
    import torch.distributed as dist

    assert images.sum().item() == pytest.approx(float(images.double().sum()))  # every page read
    int(table.sum())
    dist.barrier()  # both ranks have mapped and read everything
    shared = _shared_kib("workbench-shared-")
    dist.barrier()
    if strategy.rank == 1:
        images[0, 0] = 999.0  # a write: this worker's own page from now on
        table[0] = -1
    dist.barrier()
    return {
        "shared_kib": shared,
        "first": float(images[0, 0]),
        "table_first": int(table[0]),
        "types": (type(images).__name__, type(table).__name__),
    }


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_two_workers_share_the_pages_of_a_large_dataset_and_keep_their_writes_to_themselves():
    images = torch.arange(8 * MIB, dtype=torch.float32).reshape(2048, -1)  # 32 MiB
    table = numpy.arange(2 * MIB, dtype=numpy.int64)  # 16 MiB
    result = launch(_touch_write_and_compare, 2, args=(images, table), verbose=False)
    assert result["shared_kib"] >= 0.95 * (32 + 16) * 1024  # rank 0's mapping: pages both ranks hold
    assert result["first"] == 0.0 and result["table_first"] == 0  # rank 1's writes stayed in rank 1
    assert result["types"] == ("Tensor", "ndarray")
    assert images[0, 0] == 0 and table[0] == 0  # the notebook's own objects untouched
    assert _our_folders() == []  # removed when the launch ended


def _fail(strategy, data):
    raise RuntimeError("boom")


def test_the_files_go_when_a_launch_fails_and_a_dead_launchers_folder_goes_at_the_next():
    from workbench.parallel import WorkerFailed

    stale = sa.shared_memory_root() / "workbench-shared-999999999-abc"  # a PID that cannot run
    recent = sa.shared_memory_root() / "workbench-shared-999999998-abc"  # nor this one: but made just now
    for folder in (stale, recent):
        folder.mkdir()
        (folder / "0.bin").write_bytes(b"x")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    try:
        with pytest.raises(WorkerFailed, match="boom"):
            launch(_fail, 2, args=(torch.zeros(MIB),), verbose=False)
        assert not stale.exists()  # a dead launcher's old folder
        assert recent.exists()  # a PID this process cannot see may belong to another PID namespace: spared
    finally:
        shutil.rmtree(recent, ignore_errors=True)
    assert _our_folders() == []


def _total(strategy, data):
    return float(data.sum())


def test_without_room_in_shared_memory_the_arguments_are_copied_and_the_launch_says_so(monkeypatch, capsys):
    monkeypatch.setattr(sa.shutil, "disk_usage", lambda path: _NoRoom())
    data = torch.ones(MIB)  # 4 MiB
    assert launch(_total, 2, args=(data,)) == float(MIB)
    out = capsys.readouterr().out
    assert (
        "launch: note: 1 large argument(s) copied to each worker instead of shared (4194304 bytes > 0 free"
        in out
    )
    assert "--shm-size" in out


class _NoRoom:
    free = 0


def test_what_goes_by_value_and_what_is_shared():
    model = torch.nn.Linear(1024, 1024)  # 4 MiB of weights: each rank trains its own
    data = torch.randn(1024, 1024)
    view = data[10:20, ::2]  # a view of the same storage: no second file
    halves = data.to(torch.bfloat16)
    value = {
        "model": model,
        "data": data,
        "view": view,
        "bf16": halves,
        "grad": torch.randn(1024, 1024, requires_grad=True),
        "small": torch.ones(10),
        "columns": numpy.ones((1024, 1024))[:, ::2],  # not contiguous
        "objects": numpy.array([object()] * (MIB // 8 + 1)),
    }
    with SharedArrays() as shared:
        back = loads_sharing(pickle_sharing(value, shared))
        files = sorted(p.name for p in shared.folder.iterdir())
    assert files == ["0.bin", "1.bin"]  # data (with its view) and the bf16 copy
    assert shared.shared_bytes == 4 * MIB + 2 * MIB
    assert torch.equal(back["data"], data) and torch.equal(back["view"], view)
    assert back["view"].untyped_storage().data_ptr() == back["data"].untyped_storage().data_ptr()
    assert back["bf16"].dtype == torch.bfloat16 and torch.equal(back["bf16"], halves)
    assert back["grad"].requires_grad and torch.equal(back["model"].weight, model.weight)
    assert back["columns"].shape == (1024, 512) and len(back["objects"]) == MIB // 8 + 1
    assert pickle.loads(pickle.dumps(back["data"])).sum() == data.sum()  # a mapped tensor pickles again
    assert not shared.folder.exists()
