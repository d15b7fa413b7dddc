"""workbench: a Jupyter-centric workbench for learning and doing fast deep-learning training.

Importing the package does no work: it starts no thread, touches no device, sets no environment variable
and imports neither torch nor numba. Subpackages (data → train → monitor → widgets) are imported as needed.

    >>> import workbench
    >>> from workbench.devices import device_report
    >>> print(device_report())      # doctest: +SKIP
"""

from importlib.metadata import PackageNotFoundError, version

from workbench._distribution import DISTRIBUTION

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__", "load_ipython_extension"]


def load_ipython_extension(shell: object) -> None:
    """``%load_ext workbench``: the ``%ranks`` / ``%%ranks`` magics (`workbench.widgets.rank_cells`) and the
    tutorials' ``%%answer`` / ``%%when_written`` (`workbench.exercises.cells`)."""
    from workbench.exercises.cells import load_ipython_extension as load_exercises
    from workbench.widgets.rank_cells import load_ipython_extension as load_ranks

    load_ranks(shell)
    load_exercises(shell)
