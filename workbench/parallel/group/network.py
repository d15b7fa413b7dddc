"""Which address and interface of this machine reach another, for gloo and torchrun across machines.

Many images map the hostname to 127.0.0.1 (containers, VMs) or 127.0.1.1 (Debian's installer); gloo then
binds each rank to loopback, which other machines cannot reach ("connectFullMesh failed ... Connection
refused"), unless ``GLOO_SOCKET_IFNAME`` names the interface. `gloo_interface_env` gives it for a process
whose launcher (mpirun, srun, a plain torchrun) did not; `workbench torchrun` sets it with the rest of
`workbench.parallel.launching.multi_node`'s settings.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

_ANY_PORT = 9  # a UDP "connect" sends nothing: it only asks the kernel which route and address it would use


def gloo_interface_env(master_addr: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``{"GLOO_SOCKET_IFNAME": interface}`` where this machine's name resolves to loopback, the rendezvous
    `master_addr` is not a loopback address (so other machines may take part) and no interface was named:
    the interface on the route to `master_addr` (when `master_addr` is this machine's own name: the default
    route's, else its only address's). Empty otherwise, and where no interface reaches it (gloo's default
    then applies).

    Example:
        >>> gloo_interface_env("127.0.0.1")  # one machine: nothing to change
        {}
    """
    environ = {} if environ is None else environ
    if "GLOO_SOCKET_IFNAME" in environ or is_loopback_literal(master_addr) or not name_resolves_to_loopback():
        return {}
    try:
        endpoint = resolve(master_addr)
    except ValueError:
        return {}  # torch's rendezvous says it better
    own = address_toward(endpoint)
    interface = None if own is None else interface_of(own)
    if interface is None or ipaddress.ip_address(own).is_loopback:
        return {}
    return {"GLOO_SOCKET_IFNAME": interface}


def address_toward(endpoint: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """This machine's address on the route to `endpoint`; where `endpoint` is loopback (this machine's own
    name, as Debian's 127.0.1.1), the address other machines reach it at: on the default route, else its
    only network address (a machine without a default route). None where there is none."""
    if endpoint.is_loopback:
        return default_route_address() or only_address(own_addresses())
    return route_address(endpoint)


def is_loopback_literal(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def name_resolves_to_loopback() -> bool:
    try:
        found = {
            info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
        }
    except OSError:
        return True  # an unresolvable name: torch falls back to loopback too
    return all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in found)


def resolve(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except OSError:
        raise ValueError(
            f"the rendezvous host {host!r} does not resolve on this machine; give its IP address instead"
        ) from None


def route_address(destination: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """This machine's address on the route to `destination` (None without a route)."""
    family = socket.AF_INET6 if destination.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((str(destination), _ANY_PORT))
        except OSError:
            return None
        return probe.getsockname()[0]


def default_route_address() -> str | None:
    return route_address(ipaddress.ip_address("192.0.2.1"))  # TEST-NET-1: only the default route leads there


def own_addresses() -> set[str]:
    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}


def interface_of(address: str) -> str | None:
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addrs):
            return name
    return None


def candidate_addresses(addresses: set[str]) -> list[str]:
    """The addresses other machines could reach this one at: not loopback, not link-local.

    Example:
        >>> candidate_addresses({"127.0.0.1", "::1", "fe80::1", "10.0.0.5"})
        ['10.0.0.5']
    """
    found = []
    for address in addresses:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            continue
        if not (parsed.is_loopback or parsed.is_link_local):
            found.append(address)
    return sorted(found)


def only_address(addresses: set[str]) -> str | None:
    """The one address of `candidate_addresses`, or None where there are none or several (a machine with
    no default route: its name resolves to loopback, and one interface is the only way others reach it)."""
    found = candidate_addresses(addresses)
    return found[0] if len(found) == 1 else None
