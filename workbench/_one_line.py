"""`OneLine`: mixed into an exception, IPython shows its message as one line instead of a traceback; and
`error_in_one_line`, an error quoted inside another message."""

from __future__ import annotations


class OneLine:
    """Mix into an exception class (``class Failed(OneLine, Exception)``): in IPython and Jupyter the error
    shows as its message alone, for errors whose message already says what happened and what to do."""

    def _render_traceback_(self) -> list[str]:  # IPython calls this instead of formatting a traceback
        return [str(self)]


def error_in_one_line(error: BaseException) -> str:
    """``"Kind: the message's first line"`` (or the kind alone), for quoting an error inside a message.

    Example:
        >>> error_in_one_line(ValueError("first line\\nsecond")), error_in_one_line(IndexError())
        ('ValueError: first line', 'IndexError')
    """
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
