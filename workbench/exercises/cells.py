"""The tutorials' exercise cells in IPython (``%load_ext workbench``): ``%%answer`` and ``%%when_written``.

``%%answer`` holds one answer, collapsed: under Run All it is not run (the learner's own code stays), only
one line says it is there; with ``%%answer --run``, or ``WORKBENCH_ANSWERS=1`` in the kernel's environment
(CI), it runs as a normal cell. ``%%when_written name ...`` runs its cell once those functions are written
(none still calls `your_turn`), else says what it waits for, so Run All goes on.

    In [1]: %load_ext workbench
    In [2]: def add_ten(x):
       ...:     your_turn()
    In [3]: %%answer
       ...: def add_ten(x):
       ...:     return x + 10
    One answer, not run (it would replace yours): ...
    In [4]: %%when_written add_ten
       ...: add_ten(1)
    waiting for your add_ten (the exercise above): this cell runs once it is done
"""

from __future__ import annotations

import os
from typing import Any

from IPython.core.error import UsageError  # IPython shows it in one line, as for %ranks
from IPython.core.magic import Magics, cell_magic, magics_class

from workbench._one_line import OneLine
from workbench.exercises.waiting import ANSWERS_ENV, stub_names


class CellFailed(OneLine, Exception):
    """The cell run by ``%%answer``/``%%when_written`` raised (its traceback is above); one line."""


@magics_class
class ExerciseMagics(Magics):
    @cell_magic
    def answer(self, line: str, cell: str) -> None:
        """``%%answer [--run]``: one answer to the exercise above; Run All leaves it unrun."""
        words = line.split()
        if words not in ([], ["--run"]):
            raise UsageError(f"%%answer takes no arguments but --run, got {line.strip()!r}")
        if words or os.environ.get(ANSWERS_ENV) == "1":
            self._run(cell, "%%answer")
            return
        print(
            "One answer, not run (it would replace yours): expand this cell to read it once you have tried. "
            "To run it, make the first line %%answer --run"
        )

    @cell_magic
    def when_written(self, line: str, cell: str) -> None:
        """``%%when_written name [name ...]``: run the cell once these functions are written."""
        names = line.replace(",", " ").split()
        if not names:
            raise UsageError(
                "%%when_written needs the names of the functions its cell uses: %%when_written f g"
            )
        missing = [name for name in names if name not in self.shell.user_ns]
        if missing:
            raise UsageError(
                f"%%when_written: {', '.join(missing)} not defined yet; run the exercise's cells above first"
            )
        waiting = stub_names(self.shell.user_ns[name] for name in names)
        if waiting:
            them = "they are" if len(waiting) > 1 else "it is"
            print(
                f"waiting for your {', '.join(waiting)} (the exercise above): this cell runs once {them} done"
            )
            return
        self._run(cell, "%%when_written")

    def _run(self, cell: str, magic: str) -> None:
        result = self.shell.run_cell(cell, store_history=False)
        if not result.success:
            raise CellFailed(f"{magic}: the cell raised (above)")


def load_ipython_extension(shell: Any) -> None:
    """Register ``%%answer`` and ``%%when_written``."""
    shell.register_magics(ExerciseMagics(shell))
