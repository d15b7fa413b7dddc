"""``workbench torchrun``: torchrun with this machine's network settings and one clear line when machines
do not all join (the command lines themselves: `workbench.parallel.launching.torchrun_args`)."""

from __future__ import annotations

import sys


def torchrun(argv: list[str]) -> int:
    """``workbench torchrun ARGS``: torchrun with ARGS, ending in one line when machines do not all join."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError
    from torch.distributed.run import main as torchrun_main

    from workbench.parallel.launching.multi_node import stop_agent_after_its_workers
    from workbench.parallel.launching.torchrun_args import option, with_network_settings

    try:
        argv, reason = with_network_settings(argv)
    except ValueError as error:
        print(f"workbench torchrun: error: {error}", file=sys.stderr)
        return 2
    if reason:
        print(f"workbench torchrun: {reason}", file=sys.stderr)
    timeout = option(argv, "--collective-timeout")
    stop_agent_after_its_workers(grace_s=(int(timeout) if timeout and timeout.isdigit() else 300) + 30)
    try:
        torchrun_main(argv)
    except ChildFailedError as error:  # the ranks said why; torchrun's summary, without its traceback
        print(str(error).strip(), file=sys.stderr)
        return 1
    except RendezvousTimeoutError:
        endpoint = option(argv, "--rdzv-endpoint", "--rdzv_endpoint") or "the rendezvous endpoint"
        conf = option(argv, "--rdzv-conf", "--rdzv_conf") or ""
        timeout = next(
            (part.split("=", 1)[1] for part in conf.split(",") if part.startswith("join_timeout=")), "600"
        )
        nodes = option(argv, "--nnodes") or "all"
        print(
            f"workbench torchrun: error: not all {nodes} machines joined the rendezvous at {endpoint} within "
            f"{timeout} s; run the same command on each machine, check that {endpoint} is reachable from "
            "them (host name, open port, firewall), or give --join-timeout more seconds",
            file=sys.stderr,
        )
        return 2
    return 0
