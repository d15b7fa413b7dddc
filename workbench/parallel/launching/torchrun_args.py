"""The command lines of multi-node torchrun: the one ``workbench train --nnodes N`` prints for each
machine, and the options and environment a machine adds to join the others (`multi_node`); no torch."""

from __future__ import annotations

import argparse
import os
import re
import shlex

from workbench.parallel.launching.multi_node import torchrun_network_settings

_LAUNCHER_FLAGS = (
    "--strategy",
    "--nproc-per-node",
    "--nnodes",
    "--master-addr",
    "--master-port",
    "--join-timeout",
)


def endpoint_host(endpoint: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or a bare host (an IPv6 address has colons of its own)."""
    has_port = endpoint.count(":") == 1 or endpoint.startswith("[")
    return (endpoint.rsplit(":", 1)[0] if has_port else endpoint).strip("[]")


def with_network_settings(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` with what this machine needs to join the other machines (see `multi_node`), and why; the
    environment it needs goes into ``os.environ`` (the workers inherit it). Nothing where this machine's name
    resolves to a routable address."""
    endpoint = option(argv, "--rdzv-endpoint", "--rdzv_endpoint")
    nnodes = (option(argv, "--nnodes") or "1").split(":")[-1]
    if endpoint is None or not nnodes.isdigit():
        return argv, None
    script = argv.index("-m") if "-m" in argv else len(argv)
    options, rest = argv[:script], argv[script:]
    conf_names = ("--rdzv-conf", "--rdzv_conf")
    settings = torchrun_network_settings(
        endpoint_host(endpoint),
        nnodes=int(nnodes),
        rdzv_conf=option(options, *conf_names) or "",
        local_addr=option(options, "--local-addr", "--local_addr"),
    )
    if not settings.args and not settings.env:
        return argv, None
    os.environ.update(settings.env)
    if "--rdzv-conf" in settings.args:  # it holds the given conf too: drop the given one
        kept, skip = [], False
        for word in options:
            if skip:
                skip = False
            elif word in conf_names:
                skip = True
            elif not word.startswith(tuple(f"{name}=" for name in conf_names)):
                kept.append(word)
        options = kept
    return [*options, *settings.args, *rest], settings.reason


def option(argv: list[str], *names: str) -> str | None:
    """The value of option `names` in `argv` (``--name value`` or ``--name=value``), or None."""
    for index, word in enumerate(argv):
        for name in names:
            if word == name and index + 1 < len(argv):
                return argv[index + 1]
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None


def check_endpoint(host: str, port: int) -> None:
    """A host name or IP address and a TCP port, before they go into a command people paste."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]*|\[?[0-9A-Fa-f:.]+\]?", host):
        raise ValueError(
            f"--master-addr must be a host name or IP address of the first machine, got {host!r}; "
            "e.g. node0, node0.cluster.local or 10.0.0.1"
        )
    if not 1 <= port <= 65535:
        raise ValueError(f"--master-port must be a TCP port in 1..65535, got {port}; the default is 29500")


def torchrun_command(args: argparse.Namespace) -> str:
    """The command to run on each machine, with this command's training options."""
    kept, skip = [], False
    for word in args.argv:
        if skip:
            skip = False
        elif word == "--print-command":
            continue
        elif word in _LAUNCHER_FLAGS:
            skip = True
        elif word == "--run" or word.startswith("--run="):  # torchrun would read it as --run-path
            kept.append(word.replace("--run", "--run-name", 1))
        elif not word.startswith(tuple(f"{flag}=" for flag in _LAUNCHER_FLAGS)):
            kept.append(word)
    host = args.master_addr.strip("[]")
    endpoint = f"[{host}]:{args.master_port}" if ":" in host else f"{host}:{args.master_port}"  # IPv6
    words = [
        "workbench torchrun",  # torchrun, with one clear line when not every machine joins
        f"--nnodes {args.nnodes}",
        f"--nproc-per-node {args.nproc_per_node}",
        "--rdzv-backend c10d",
        f"--rdzv-endpoint {shlex.quote(endpoint)}",
        f"--rdzv-id {shlex.quote(args.run_name or args.preset)}",
        f"--rdzv-conf join_timeout={args.join_timeout}",
        "-m workbench",
        shlex.join([*kept, "--strategy", args.strategy]),
    ]
    machines = "this machine" if args.nnodes == 1 else f"each of the {args.nnodes} machines"
    return (
        f"# run on {machines}; {args.master_addr} must be reachable from all of them "
        f"(port {args.master_port} open); the run waits {args.join_timeout} s for every machine to join "
        "(--join-timeout):\n" + " \\\n    ".join(words)
    )
