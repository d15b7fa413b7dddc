"""`OneLine`: mixed into an exception, IPython shows its message as one line instead of a traceback."""

from __future__ import annotations


class OneLine:
    """Mix into an exception class (``class Failed(OneLine, Exception)``): in IPython and Jupyter the error
    shows as its message alone, for errors whose message already says what happened and what to do."""

    def _render_traceback_(self) -> list[str]:  # IPython calls this instead of formatting a traceback
        return [str(self)]
