"""Large tensors and arrays reach launch workers without a copy per rank: one file in shared memory, mapped
copy-on-write by every worker.

While the launcher pickles a worker's payload, each CPU tensor or NumPy array of `MIN_BYTES` or more (the
dataset a notebook built, typically) is written once to a file under ``/dev/shm`` (the temp folder where
there is none) and pickled as a reference to that file. Each worker maps the file privately
(``torch.from_file(shared=False)``, ``numpy.memmap(mode="c")``): the pages are the same physical memory in
every worker until one writes to them, and a write stays that worker's own, so the arguments behave exactly
like copies. Left by value: tensors of a module (parameters, buffers: each rank trains its own), tensors that
require grad, GPU, sparse or quantized tensors, arrays of Python objects, and anything that does not fit in
the folder's free space. The folder is removed when the launch ends; one left by a launcher that was killed
is removed by the next launch.

Example:
    >>> import numpy, pickle
    >>> with SharedArrays() as shared:
    ...     data = pickle_sharing({"x": numpy.arange(1 << 18, dtype=numpy.float64)}, shared)
    ...     loads_sharing(data)["x"][-3:], shared.shared_bytes
    (array([262141., 262142., 262143.]), 2097152)
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import cloudpickle
import numpy
import psutil
import torch

MIN_BYTES = 1 << 20  # smaller objects cost more as files than as bytes in the payload
_FOLDER_PREFIX = "workbench-shared-"
_TORCH_DTYPES = {
    dtype: str(dtype).removeprefix("torch.")
    for dtype in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
        torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
    )
}  # fmt: skip


def shared_memory_root() -> Path:
    """Where the files go: ``/dev/shm`` (memory) when writable, else the temp folder (the page cache)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class SharedArrays:
    """The files of one launch's shared arrays: a folder named after this process, removed by `close`."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        root = Path(root) if root is not None else shared_memory_root()
        remove_stale_folders(root)
        self.folder = Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-", dir=root))
        self.shared_bytes = 0  # what went to files instead of every worker's payload
        self.by_value: list[str] = []  # why large objects were pickled by value anyway
        self._files: dict[tuple[str, int], str] = {}  # (kind, address) → file, so views share one file
        self._module_storages: set[int] = set()

    def __enter__(self) -> SharedArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the files (workers that mapped them keep their mappings)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def reference(self, obj: Any) -> tuple[Any, ...] | None:
        """The persistent id of `obj` when it goes to a file, else None (pickled by value)."""
        if isinstance(obj, torch.nn.Module):
            tensors = (*obj.parameters(), *obj.buffers())  # a Parameter pickles its .data: match storages
            self._module_storages.update(
                t.untyped_storage().data_ptr() for t in tensors if t.layout == torch.strided
            )
            return None
        if type(obj) is torch.Tensor:
            return self._tensor(obj)
        if type(obj) is numpy.ndarray:
            return self._array(obj)
        return None

    def _tensor(self, tensor: torch.Tensor) -> tuple[Any, ...] | None:
        storage_bytes = tensor.untyped_storage().nbytes() if tensor.layout == torch.strided else 0
        if (
            storage_bytes < MIN_BYTES
            or tensor.untyped_storage().data_ptr() in self._module_storages
            or tensor.device.type != "cpu"
            or tensor.requires_grad
            or tensor.dtype not in _TORCH_DTYPES
            or tensor.is_conj()
            or tensor.is_neg()
        ):
            return None
        storage = tensor.untyped_storage()
        raw = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage_bytes,))
        path = self._write(("torch", storage.data_ptr()), raw.numpy())
        if path is None:
            return None
        dtype = _TORCH_DTYPES[tensor.dtype]
        return ("torch", path, dtype, tuple(tensor.shape), tensor.stride(), tensor.storage_offset())

    def _array(self, array: numpy.ndarray) -> tuple[Any, ...] | None:
        if array.nbytes < MIN_BYTES or array.dtype.hasobject or not array.flags.c_contiguous:
            return None
        path = self._write(("numpy", array.__array_interface__["data"][0]), array)
        return None if path is None else ("numpy", path, array.dtype.str, array.shape)

    def _write(self, key: tuple[str, int], data: numpy.ndarray) -> str | None:
        if key in self._files:
            return self._files[key]
        path = self.folder / f"{len(self._files)}.bin"
        free = shutil.disk_usage(self.folder).free
        if data.nbytes > free:
            self.by_value.append(f"{data.nbytes} bytes > {free} free in {self.folder.parent}")
            return None
        try:
            data.tofile(path)
        except OSError as error:  # the folder filled up meanwhile
            path.unlink(missing_ok=True)
            self.by_value.append(f"{data.nbytes} bytes: {error.strerror or error}")
            return None
        self._files[key] = str(path)
        self.shared_bytes += data.nbytes
        return str(path)


def pickle_sharing(value: Any, shared: SharedArrays | None) -> bytes:
    """`value` cloudpickled, its large tensors and arrays as references to files of `shared` (if any)."""
    buffer = io.BytesIO()
    _Pickler(buffer, shared).dump(value)
    return buffer.getvalue()


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with shared arrays by reference and imported module objects of module subclasses by name.

    cloudpickle sends a notebook function's imported submodules along with it (``dist.…`` plus a global
    named ``config`` brings ``torch.distributed.config``); torch's config modules are instances of a
    `ModuleType` subclass, which cloudpickle's table of reducers (keyed by exact type) misses.
    """

    def __init__(self, file: io.BytesIO, shared: SharedArrays | None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def persistent_id(self, obj: Any) -> Any:
        return None if self.shared is None else self.shared.reference(obj)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType:
            name = getattr(obj, "__name__", None)
            if name is not None and sys.modules.get(name) is obj:
                return importlib.import_module, (name,)
        return super().reducer_override(obj)


def loads_sharing(data: bytes) -> Any:
    """The value `pickle_sharing` pickled, each shared tensor and array mapped copy-on-write."""

    storages: dict[str, torch.UntypedStorage] = {}  # file → its mapping: views share one, as they did

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, reference: Any) -> Any:
            return _map(reference, storages)

    return Unpickler(io.BytesIO(data)).load()


def remove_stale_folders(root: str | os.PathLike, min_age_s: float = 600) -> list[Path]:
    """Delete the folders of launchers that are gone (their PID no longer runs) and that are older than
    `min_age_s` seconds; returns them. The age spares a live launcher whose PID this process cannot see
    (another PID namespace sharing /dev/shm): by then its workers have mapped their files, which outlive
    the deletion."""
    removed = []
    now = time.time()
    for folder in Path(root).glob(f"{_FOLDER_PREFIX}*"):
        match = re.match(rf"{_FOLDER_PREFIX}(\d+)-", folder.name)
        if match is None or psutil.pid_exists(int(match.group(1))):
            continue
        try:
            if now - folder.stat().st_mtime < min_age_s:
                continue
        except FileNotFoundError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _map(reference: tuple[Any, ...], storages: dict[str, torch.UntypedStorage]) -> Any:
    kind, path, dtype, shape, *layout = reference
    if kind == "numpy":
        return numpy.memmap(path, dtype=numpy.dtype(dtype), mode="c", shape=shape).view(numpy.ndarray)
    if path not in storages:
        size = os.path.getsize(path)
        storages[path] = torch.from_file(path, shared=False, size=size, dtype=torch.uint8).untyped_storage()
    stride, offset = layout
    return torch.empty(0, dtype=getattr(torch, dtype)).set_(storages[path], offset, shape, stride)
