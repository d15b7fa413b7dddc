"""Keep a widget usable when the kernel handles its messages while a cell awaits (ipykernel ≥ 7).

ipykernel 7 dispatches widget (comm) messages while a running cell awaits, which is what lets the
Dashboard's buttons act under Run All (`Dashboard.wait_async`). It sends no busy/idle status for such a
message, though, and ipywidgets' frontend sends a widget's next state change (a toggle, a typed value)
only after the kernel said "idle" for the previous one: without it, the second click on Pause/Resume, or a
second lr typed in, stayed in the browser for good. `acknowledge_widget_message` sends that "idle" from
the handler of the message, then "busy" again for the cell that is still running (the kernel's indicator
would otherwise say idle while it runs). Outside such a dispatch (between cells, no kernel, another
kernel) it does nothing. It reads ipykernel's private `_main_asyncio_lock` and `_publish_status`; when
they are missing it does nothing, and the widget behaves as before.
"""

from __future__ import annotations

from typing import Any

from workbench._jupyter import running_kernel


def running_cell_parent() -> dict[str, Any] | None:
    """The request of the cell running now (call it from the cell), or None outside a kernel."""
    kernel = running_kernel()
    return None if kernel is None else kernel.get_parent("shell")


def acknowledge_widget_message(cell_parent: dict[str, Any] | None) -> None:
    """Called from a widget's change handler: tell the frontend this widget message is done (see above).

    Args:
        cell_parent: the request of the cell awaiting meanwhile (`running_cell_parent`), to say "busy"
            for it again; None skips that.
    """
    kernel = running_kernel()
    if kernel is None:
        return
    lock = getattr(kernel, "_main_asyncio_lock", None)
    publish = getattr(kernel, "_publish_status", None)
    if lock is None or publish is None or not lock.locked():  # between cells ipykernel says idle itself
        return
    message = kernel.get_parent("shell")
    if message.get("header", {}).get("msg_type") != "comm_msg":
        return
    publish("idle", "shell", parent=message)
    if cell_parent is not None and cell_parent.get("header"):
        publish("busy", "shell", parent=cell_parent)
