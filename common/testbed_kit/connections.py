"""The network namespace's established TCP connections, from the kernel's tables.

A measurement client that connected to a server but never saw the test start must be
told apart from a slow transfer: iperf3 opens its control connection first and its
data connections only once the server has answered, and ITGSend its signalling
connection before any data. Counting the namespace's established connections to the
server's port tells which (:func:`connections_to`, the ``started`` test of
:func:`testbed_kit.watch.run_watched`). The parsing is pure (:func:`established_to`).
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from testbed_kit.contract import ExperimentError

#: Where the kernel lists the namespace's TCP connections.
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
#: /proc/net/tcp's state code for an established connection.
_ESTABLISHED = "01"


def _proc_address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``0100007F:1451`` (IPv4) or a 32-hex-digit IPv6 address, as the kernel prints
    them in /proc/net/tcp{,6}: 32-bit words in host (little-endian) order."""
    addr_hex, port_hex = field.split(":")
    raw = bytes.fromhex(addr_hex)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    if len(words) == 4:
        addr = ipaddress.IPv4Address(words)
    else:
        addr = ipaddress.IPv6Address(words)
        if addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
    return addr, int(port_hex, 16)


def established_to(table: str, server: str, port: int) -> int:
    """How many established TCP connections in a /proc/net/tcp{,6} listing go to
    ``server:port`` (pure). iperf3 opens its control connection first and its data
    connections only once the server has answered, so one connection that stays alone
    means a server that accepted but does not speak."""
    target = ipaddress.ip_address(server)
    count = 0
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _ESTABLISHED:
            continue
        try:
            remote = _proc_address(fields[2])
        except ValueError:
            continue
        if remote == (target, port):
            count += 1
    return count


def connections_to(server: str, port: int) -> int:
    """Established connections from this network namespace to ``server:port``
    (``server`` an address: see :func:`server_ip`)."""
    count = 0
    for table in TCP_TABLES:
        try:
            count += established_to(table.read_text(), server, port)
        except OSError:
            continue  # no IPv6 in the namespace
    return count


def server_ip(server: str) -> str:
    """The server's address as the kernel's tables show it (names are resolved)."""
    try:
        return socket.gethostbyname(server)
    except OSError as e:
        raise ExperimentError(f"cannot resolve the measurement server {server!r}: {e}") from e
