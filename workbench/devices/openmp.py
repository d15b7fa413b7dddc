"""The OpenMP runtime torch's CPU ops run on, and the one thing we ask of it: let go of a thread's idle team.

GNU OpenMP (libgomp, which torch's Linux wheels bundle) keeps a team of worker threads for every thread that
has run a parallel region, and counts them all. Once they outnumber the cores, every team's workers stop
spinning between parallel regions and sleep at once, so each small op (a 64×128 matmul, an elementwise op
over a batch) waits for a futex wake-up. A notebook's main thread keeps the team its earlier cells built;
training then started on a second thread (`Dashboard.start`) ran 2-4x slower on CPU than on the main
thread (2 cores, 2026-11-29: `workbench bench trainer`'s second-thread rows).

`release_idle_threads` frees the calling thread's team (``omp_pause_resource_all(omp_pause_soft)``,
OpenMP 5.0) in every libgomp copy of the process; its next parallel op builds it again. It touches no
other thread's team, and does nothing where torch's OpenMP runtime is not libgomp (macOS, Windows:
another runtime, which counts differently).

    >>> import torch  # maps torch's OpenMP runtime into the process
    >>> release_idle_threads()  # Linux, torch's wheel: libgomp let go of this thread's team
    True
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from functools import cache

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: free the runtime's resources, keep its settings
_LIBGOMP = re.compile(r"/libgomp[-.\w]*\.so[.\d]*$")


def release_idle_threads() -> bool:
    """Free the calling thread's idle OpenMP worker threads in every libgomp mapped into this process
    (torch's, and others such as scikit-learn's own copy); True if each one asked did, False where none
    could be asked (no libgomp loaded, or only older ones without OpenMP 5.0) or one refused (the caller is
    inside a parallel region).

    Call it on a thread that is about to leave the CPU work to another thread (`JobRunner.start`, and the
    end of each notebook cell while its job runs).
    """
    answers = [pause(OMP_PAUSE_SOFT) for pause in _pause_functions(tuple(loaded_libgomps()))]
    return bool(answers) and all(answer == 0 for answer in answers)


@cache
def _pause_functions(paths: tuple[str, ...]) -> tuple[Callable[[int], int], ...]:
    functions = []
    for path in paths:
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all  # the mapped copy: dlopen hands back its handle
        except (OSError, AttributeError):
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        functions.append(pause)
    return tuple(functions)


def loaded_libgomps(maps: str | None = None) -> list[str]:
    """The paths of the libgomp copies mapped into this process (torch's once torch is imported; a wheel
    may bring its own, as scikit-learn's does), in the order of the map.

    `maps`: the text of ``/proc/self/maps`` (read here when None; none where there is no /proc).

    Example:
        >>> loaded_libgomps(
        ...     "7f00-7f01 r-xp 0 08:01 5 /venv/torch/lib/libgomp.so.1\\n"
        ...     "7f01-7f02 r--p 0 08:01 5 /venv/torch/lib/libgomp.so.1\\n"
        ...     "7f02-7f03 r-xp 0 08:01 6 /venv/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0\\n"
        ...     "7f03-7f04 r-xp 0 08:01 7 /usr/lib/libomp.so\\n"
        ... )
        ['/venv/torch/lib/libgomp.so.1', '/venv/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0']
    """
    if maps is None:
        try:
            with open(f"/proc/{os.getpid()}/maps", encoding="utf-8") as mapped:
                maps = mapped.read()
        except OSError:
            return []
    paths: dict[str, None] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and _LIBGOMP.search(fields[5]):
            paths[fields[5]] = None
    return list(paths)
