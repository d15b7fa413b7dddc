"""Two machines for real: two network namespaces with their own addresses on a veth pair, each running the
command `workbench train --nnodes 2` prints, exactly as printed, while this machine's name resolves to
loopback (as in many containers and VMs). Skipped where namespaces cannot be made (not root, no `ip`)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.train import read_metrics

BIN = str(Path(sys.executable).parent)  # the venv's `workbench`


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def two_hosts():
    """Namespaces A (10.77.0.1) and B (10.77.0.2) on one veth link; removed afterwards (with the link)."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) to make network namespaces")
    tag = f"wb{os.getpid() % 100000}"
    hosts = {f"{tag}a": "10.77.0.1", f"{tag}b": "10.77.0.2"}
    made = [name for name in hosts if _ip("netns", "add", name).returncode == 0]
    try:
        if len(made) < 2:
            pytest.skip("cannot make network namespaces here (needs root or CAP_NET_ADMIN)")
        (a, b), (link_a, link_b) = hosts, (f"{tag}va", f"{tag}vb")
        steps = [
            ("link", "add", link_a, "type", "veth", "peer", "name", link_b),
            ("link", "set", link_a, "netns", a),
            ("link", "set", link_b, "netns", b),
            ("-n", a, "addr", "add", f"{hosts[a]}/24", "dev", link_a),
            ("-n", b, "addr", "add", f"{hosts[b]}/24", "dev", link_b),
            ("-n", a, "link", "set", link_a, "up"),
            ("-n", b, "link", "set", link_b, "up"),
            ("-n", a, "link", "set", "lo", "up"),
            ("-n", b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield hosts
    finally:
        for name in made:
            _ip("netns", "del", name)


def _in(host: str, command: list[str], cwd: Path) -> subprocess.Popen:
    """`command` on `host`, what it prints going to ``cwd/<host>.out`` (`_printed`): two hosts' pipes read
    one after the other could fill the second's, and stall its rank while the first's agent waits for it."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    with (cwd / f"{host}.out").open("wb") as out:
        node = subprocess.Popen(
            ["ip", "netns", "exec", host, *command], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    node.output = cwd / f"{host}.out"
    return node


def _printed(node: subprocess.Popen) -> str:
    return node.output.read_text(errors="replace")


def _wait(node: subprocess.Popen, nodes: list[subprocess.Popen], timeout_s: float) -> str:
    """What `node` printed once it ended; on a timeout, the failure shows what every host printed."""
    try:
        node.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        shown = "\n--- next host ---\n".join(_printed(other)[-3000:] for other in nodes)
        pytest.fail(f"{node.output.stem} had not ended after {timeout_s} s; each host printed:\n{shown}")
    return _printed(node)


def test_the_printed_command_trains_on_two_hosts_whose_name_resolves_to_loopback(two_hosts, tmp_path):
    (host_a, address_a), (host_b, address_b) = two_hosts.items()
    train = ["train", "digits-mlp", "--strategy", "ddp", "--epochs", "1", "--runs-dir", str(tmp_path)]
    printed_by = ["--run", "two-hosts", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", address_a]
    printed = subprocess.run(
        [sys.executable, "-m", "workbench", *train, *printed_by, "--join-timeout", "60"],
        capture_output=True,
        text=True,
    )
    assert printed.returncode == 0, printed.stderr
    nodes = [_in(host, ["bash", "-c", printed.stdout], tmp_path) for host in (host_a, host_b)]
    try:
        outputs = [_wait(node, nodes, 180) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "Traceback" not in "".join(outputs)
    if "resolves to loopback" in outputs[1]:  # this machine's name resolves to loopback: the settings said so
        assert f"reach it at {address_b}" in outputs[1] and "hosts the rendezvous" in outputs[0]
    assert "finished:" in outputs[0] and "finished:" not in outputs[1]  # rank 0 reports, on the first host
    # the same numbers as two processes on one machine
    local = subprocess.run(
        [sys.executable, "-m", "workbench", *train, "--run", "one-host", "--nproc-per-node", "2"],
        capture_output=True,
        text=True,
    )
    assert local.returncode == 0, local.stderr
    two_hosts_steps = read_metrics(tmp_path / "two-hosts", kind="step")
    one_host_steps = read_metrics(tmp_path / "one-host", kind="step")
    assert [s["step"] for s in two_hosts_steps] == [s["step"] for s in one_host_steps] == [10, 12]
    assert [s["loss"] for s in two_hosts_steps] == pytest.approx(
        [s["loss"] for s in one_host_steps], rel=1e-5
    )
    assert {s["world_size"] for s in read_metrics(tmp_path / "two-hosts", kind="fit_start")} == {2}


def test_each_host_finds_its_own_address_and_only_the_first_hosts_the_rendezvous(two_hosts):
    (host_a, address_a), (host_b, address_b) = two_hosts.items()
    probe = (
        "import sys; from workbench.parallel.launching import multi_node as m; "
        "m.network.name_resolves_to_loopback = lambda: True; "
        "s = m.torchrun_network_settings(sys.argv[1], nnodes=2, rdzv_conf='join_timeout=5', environ={}); "
        "print(s.args, s.env)"
    )
    found = {}
    for host in (host_a, host_b):
        done = subprocess.run(
            ["ip", "netns", "exec", host, sys.executable, "-c", probe, address_a],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        found[host] = done.stdout.strip()
    link_a, link_b = (f"{host[:-1]}v{host[-1]}" for host in (host_a, host_b))
    assert found[host_a] == (
        f"['--rdzv-conf', 'join_timeout=5,is_host=1', '--local-addr', '{address_a}'] "
        f"{{'GLOO_SOCKET_IFNAME': '{link_a}'}}"
    )
    assert found[host_b] == f"['--local-addr', '{address_b}'] {{'GLOO_SOCKET_IFNAME': '{link_b}'}}"
    unreachable = subprocess.run(
        ["ip", "netns", "exec", host_b, sys.executable, "-c", probe, "10.99.0.1"],
        capture_output=True,
        text=True,
    )
    assert "no network interface reaches '10.99.0.1'" in unreachable.stderr


def test_a_cut_network_stops_both_hosts_within_the_collective_timeout_with_one_line_each(two_hosts, tmp_path):
    """The link between the hosts goes down mid-run: each rank says so in one line after --collective-timeout;
    the cut-off host's torchrun agent, stuck reading from the unreachable rendezvous host, is stopped too."""
    import time

    (host_a, address_a), (host_b, _) = two_hosts.items()
    link_b = f"{host_b[:-1]}v{host_b[-1]}"
    argv = ["train", "digits-mlp", "--strategy", "ddp", "--epochs", "500", "--runs-dir", str(tmp_path)]
    argv += ["--run", "cut", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", address_a]
    printed = subprocess.run(
        [sys.executable, "-m", "workbench", *argv, "--collective-timeout", "5", "--join-timeout", "60"],
        capture_output=True,
        text=True,
    )
    assert printed.returncode == 0, printed.stderr
    nodes = [_in(host, ["bash", "-c", printed.stdout], tmp_path) for host in (host_a, host_b)]
    try:
        metrics = tmp_path / "cut" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count('"event": "step"') >= 3):
            assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), (
                "the run did not start"
            )
            time.sleep(0.5)
        assert _ip("-n", host_b, "link", "set", link_b, "down").returncode == 0
        cut = time.monotonic()
        outputs, ended = [], []
        for node in nodes:
            outputs.append(_wait(node, nodes, 120))
            ended.append(time.monotonic() - cut)
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [1, 1], outputs
    assert "Traceback" not in "".join(outputs)
    assert "workbench train: error: rank 0 lost the other ranks" in outputs[0]
    assert "--collective-timeout 5 s" in outputs[0]
    assert "workbench train: error: rank 1 lost" in outputs[1]
    assert "torchrun still waits for the rendezvous host (cut off from this machine?); stopping" in outputs[1]
    assert ended[0] < 5 + 15  # the collective timeout, then the agent's own shutdown
    assert ended[1] < 5 + 35 + 20  # and the agent watchdog's grace (the timeout + 30 s)


@pytest.mark.parametrize("endpoint", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_endpoint_is_several_machines_tried_on_this_one_and_changes_nothing(endpoint, monkeypatch):
    from workbench.parallel.group import network
    from workbench.parallel.launching import multi_node

    monkeypatch.setattr(network, "name_resolves_to_loopback", lambda: True)
    settings = multi_node.torchrun_network_settings(endpoint, nnodes=2, environ={})
    assert (settings.args, settings.env) == ([], {})


def test_this_machines_own_name_resolving_to_loopback_hosts_at_its_default_route_address(monkeypatch):
    import ipaddress
    import socket

    from workbench.parallel.group import network
    from workbench.parallel.launching import multi_node

    monkeypatch.setattr(network, "name_resolves_to_loopback", lambda: True)
    monkeypatch.setattr(network, "default_route_address", lambda: "10.1.2.3")
    monkeypatch.setattr(network, "interface_of", lambda address: "eth7")
    monkeypatch.setattr(network, "resolve", lambda host: ipaddress.ip_address("127.0.1.1"))  # Debian's
    settings = multi_node.torchrun_network_settings(socket.gethostname(), nnodes=2, environ={})
    assert settings.args == ["--rdzv-conf", "is_host=1", "--local-addr", "10.1.2.3"]
    assert settings.env == {"GLOO_SOCKET_IFNAME": "eth7"}
    kept = multi_node.torchrun_network_settings(
        socket.gethostname(), nnodes=2, local_addr="10.9.9.9", environ={"GLOO_SOCKET_IFNAME": "ib0"}
    )
    assert (kept.args, kept.env) == (["--rdzv-conf", "is_host=1"], {})


MPI_RANK = """
import torch, torch.distributed as dist
from workbench.parallel import join_process_group_from_env
join_process_group_from_env(timeout_s=30)
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
print("sum", total.item())
dist.destroy_process_group()
"""


def test_ranks_under_mpirun_on_two_hosts_whose_name_resolves_to_loopback_find_each_other(two_hosts):
    """What `mpirun -x MASTER_ADDR=<first host>` gives each process (Open MPI's variables, one rank per
    machine): gloo listened on loopback and the ranks could not connect ("connectFullMesh failed"), as
    `workbench torchrun` already handled; now the rank picks the interface that reaches MASTER_ADDR."""
    (host_a, address_a), (host_b, _) = two_hosts.items()
    launchers = ("OMPI_", "PMI", "SLURM_", "GLOO_", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launchers)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    ranks = []
    for rank, host in enumerate((host_a, host_b)):
        mpi = {
            "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": address_a, "MASTER_PORT": "29517",
        }  # fmt: skip
        ranks.append(
            subprocess.Popen(
                ["ip", "netns", "exec", host, sys.executable, "-c", MPI_RANK],
                env={**env, **mpi},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [rank.communicate(timeout=90)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    assert all("sum 3.0" in output for output in outputs), outputs
    if "resolves to loopback" in outputs[0]:  # this machine's name does: rank 0 said which interface
        assert "the interface that reaches 10.77.0.1" in outputs[0]


def test_without_a_default_route_the_machines_only_address_is_where_the_others_reach_it(monkeypatch):
    """`--master-addr <own name>` on a machine without a default route said no interface reaches it,
    although eth0 does: its only address is taken; with several, the error lists them."""
    import ipaddress
    import socket

    from workbench.parallel.group import network
    from workbench.parallel.launching import multi_node

    monkeypatch.setattr(network, "name_resolves_to_loopback", lambda: True)
    monkeypatch.setattr(network, "default_route_address", lambda: None)
    monkeypatch.setattr(network, "resolve", lambda host: ipaddress.ip_address("127.0.1.1"))
    monkeypatch.setattr(network, "interface_of", lambda address: {"10.7.0.1": "eth0"}.get(address, "ib0"))
    monkeypatch.setattr(network, "own_addresses", lambda: {"127.0.0.1", "::1", "fe80::9", "10.7.0.1"})
    settings = multi_node.torchrun_network_settings(socket.gethostname(), nnodes=2, environ={})
    assert settings.args == ["--rdzv-conf", "is_host=1", "--local-addr", "10.7.0.1"]
    assert settings.env == {"GLOO_SOCKET_IFNAME": "eth0"}
    monkeypatch.setattr(network, "own_addresses", lambda: {"127.0.0.1", "10.7.0.1", "10.8.0.1"})
    with pytest.raises(ValueError, match=r"addresses: 10\.7\.0\.1 \(eth0\), 10\.8\.0\.1 \(ib0\)\); give"):
        multi_node.torchrun_network_settings(socket.gethostname(), nnodes=2, environ={})
