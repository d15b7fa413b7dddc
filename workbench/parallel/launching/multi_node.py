"""Multi-machine torchrun where a machine's own name resolves to a loopback address.

Many images map the hostname to 127.0.0.1 (containers, VMs) or 127.0.1.1 (Debian's installer). torchrun
and gloo then go wrong without a word: the first machine does not recognise the rendezvous address as its
own, so no machine hosts the rendezvous (every machine times out); the first machine tells the others to
reach it at its name (which they resolve elsewhere, or it resolves to loopback); and gloo binds each rank to
loopback, which the other machines cannot reach. `torchrun_network_settings` finds, on each machine, the
address and interface that reach the rendezvous endpoint, and gives torchrun what it needs
(``--rdzv-conf is_host=1`` on the endpoint's machine, ``--local-addr``, ``GLOO_SOCKET_IFNAME``), so the same
printed command works on every machine. Where the name resolves properly it changes nothing.

Example:
    >>> settings = torchrun_network_settings("127.0.0.1", nnodes=1)  # one machine: nothing to change
    >>> settings.args, settings.env
    ([], {})
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

from workbench.parallel.group import network


@dataclass(frozen=True)
class NetworkSettings:
    """What to add to a torchrun command line (`args`) and its environment (`env`), and why (`reason`)."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    reason: str = ""


def torchrun_network_settings(
    endpoint_host: str, *, nnodes: int, rdzv_conf: str = "", local_addr: str | None = None, environ=None
) -> NetworkSettings:
    """The torchrun options and environment this machine needs to join a rendezvous at `endpoint_host`.

    Args:
        endpoint_host: the host of ``--rdzv-endpoint`` (a name or IP address).
        nnodes: torchrun's ``--nnodes`` (``"2"`` or ``"1:4"`` counted by its upper end); one machine needs
            nothing.
        rdzv_conf: torchrun's ``--rdzv-conf`` as given (an ``is_host`` there is kept).
        local_addr: torchrun's ``--local-addr`` as given (kept when given).
        environ: the environment (``os.environ``); a ``GLOO_SOCKET_IFNAME`` there is kept.

    Raises:
        ValueError: the endpoint's name does not resolve, or no interface of this machine reaches it.
    """
    environ = os.environ if environ is None else environ
    if nnodes <= 1 or network.is_loopback_literal(endpoint_host) or not network.name_resolves_to_loopback():
        return NetworkSettings()  # one machine, several "machines" tried on this one, or a proper name
    endpoint = network.resolve(endpoint_host)
    # a name that resolves to loopback here is this machine's own (Debian's 127.0.1.1): the others reach it
    # at its address on the default route (without one, at its only network address)
    own = network.address_toward(endpoint)
    if own is None or ipaddress.ip_address(own).is_loopback:
        candidates = network.candidate_addresses(network.own_addresses())
        addresses = ", ".join(f"{a} ({network.interface_of(a)})" for a in candidates)
        raise ValueError(
            f"this machine's name {socket.gethostname()!r} resolves to a loopback address and no network "
            f"interface reaches {endpoint_host!r} (this machine's addresses: {addresses or 'none'}); give "
            "--master-addr the first machine's address on the network the machines share (e.g. 10.0.0.1), "
            "or set GLOO_SOCKET_IFNAME and --local-addr yourself"
        )
    args: list[str] = []
    hosting = endpoint.is_loopback or str(endpoint) in network.own_addresses()
    if hosting and "is_host" not in rdzv_conf:
        args += ["--rdzv-conf", ",".join(filter(None, [rdzv_conf, "is_host=1"]))]
    if local_addr is None:
        args += ["--local-addr", own]
    env = {}
    interface = network.interface_of(own)
    if "GLOO_SOCKET_IFNAME" not in environ and interface is not None:
        env["GLOO_SOCKET_IFNAME"] = interface
    reason = (
        f"this machine's name {socket.gethostname()!r} resolves to loopback: the other machines reach it at "
        f"{own} ({interface or 'its interface'})"
        + ("; it hosts the rendezvous" if hosting else "")
        + f" ({' '.join(args)}{' ' if args and env else ''}{' '.join(f'{k}={v}' for k, v in env.items())})"
    )
    return NetworkSettings(args, env, reason)


def stop_agent_after_its_workers(grace_s: float, *, poll_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that ends this process (exit status 1, one line on stderr) when the torchrun
    agent running in it outlives its workers by `grace_s` seconds.

    After a network partition, the agent on a machine cut off from the rendezvous host waits in a socket
    read without a timeout (torch's TCPStore), deaf to Ctrl-C and SIGTERM, for ever. Its workers have
    stopped by then (their collectives time out), so "workers gone for longer than any normal shutdown"
    is the sign. Armed only once workers have existed: waiting to join a rendezvous is not a hang.
    """

    def watch() -> None:
        me = psutil.Process()
        seen_workers, gone_since = False, None
        while True:
            time.sleep(poll_s)
            if any(_alive(child) for child in me.children()):  # a worker not yet reaped is gone too
                seen_workers, gone_since = True, None
            elif seen_workers:
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > grace_s:
                    print(
                        f"workbench torchrun: error: the workers ended {grace_s:g} s ago and torchrun still "
                        "waits for the rendezvous host (cut off from this machine?); stopping",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)

    watcher = threading.Thread(target=watch, name="workbench-agent-watchdog", daemon=True)
    watcher.start()
    return watcher


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
