"""Addresses, node ids and positions made fit to publish.

Addresses go through Crypto-PAn (Xu et al., 2002) keyed per release: prefix-preserving,
so two addresses that share a /n share a /n after it, and one-to-one, so flows stay
distinguishable; without the key the mapping cannot be undone or redone. The
implementation is ``yacryptopan`` (AES from ``pycryptodomex``), tested against the
reference vectors published with Crypto-PAn. Node pseudonyms, and the digests of the
SIM's serial (ICCID) and of the modem's id in the agent's records, are HMACs under keys
derived from the same release key: unkeyed, a digest of an ICCID or IMEI is undone by
trying the few million serials of one issuer or modem model. Positions snap to the
centre of a grid cell, so a node's site is known to the cell and no better.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
from dataclasses import dataclass, field

from yacryptopan import CryptoPAn

from orchestrator.dataset.keys import KEY_BYTES, BadKey, check_key

__all__ = ["KEY_BYTES", "Anonymiser", "BadKey", "check_key", "coarsen"]

#: IPv4 dotted quads and IPv6 texts (with at least two colons and a hex group) as they
#: appear in logs and JSON; candidates only: each is parsed before it is replaced.
_IPV4_TEXT = r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])"
_IPV6_TEXT = r"(?<![0-9A-Fa-f:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])"
_ADDRESS_TEXT = re.compile(f"{_IPV4_TEXT}|{_IPV6_TEXT}")


@dataclass
class Anonymiser:
    """The release's anonymisation, one key for all of it; remembers what it mapped."""

    key: bytes
    _pan: CryptoPAn = field(init=False, repr=False)
    _pseudonym_key: bytes = field(init=False, repr=False)
    _identifier_key: bytes = field(init=False, repr=False)
    _seen: dict[bytes, bytes] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_key(self.key)
        self._pan = CryptoPAn(self.key)
        self._pseudonym_key = hmac.new(self.key, b"node pseudonyms", hashlib.sha256).digest()
        self._identifier_key = hmac.new(self.key, b"identifiers", hashlib.sha256).digest()

    def packed(self, raw: bytes) -> bytes:
        """An address in network byte order (4 or 16 bytes), anonymised."""
        done = self._seen.get(raw)
        if done is None:
            version, width = (4, 32) if len(raw) == 4 else (6, 128)
            if len(raw) not in (4, 16):
                raise ValueError(f"an IP address is 4 or 16 bytes, not {len(raw)}")
            value = self._pan.anonymize_bin(int.from_bytes(raw, "big"), version=version)
            done = int(value).to_bytes(width // 8, "big")
            self._seen[raw] = done
        return done

    def address(self, text: str) -> str:
        """An address as text (``192.0.2.1``, ``2001:db8::1``), anonymised."""
        ip = ipaddress.ip_address(text)
        return str(ipaddress.ip_address(self.packed(ip.packed)))

    def text(self, text: str) -> str:
        """``text`` with every IP address in it anonymised (logs, JSON results)."""
        def swap(m: re.Match[str]) -> str:
            try:
                return self.address(m.group(0))
            except ValueError:  # 999.1.2.3, a time such as 12:30:00: not an address
                return m.group(0)
        return _ADDRESS_TEXT.sub(swap, text)

    def originals(self) -> set[bytes]:
        """Every address mapped so far, as it was (for the release's own leak check)."""
        return set(self._seen)

    def node(self, node_id: str) -> str:
        """A stable pseudonym of a node id: the same in every table and file of a
        release, unrelated across releases with different keys."""
        digest = hmac.new(self._pseudonym_key, node_id.encode(), hashlib.sha256).hexdigest()
        return f"node-{digest[:12]}"

    def identifier(self, kind: str, value: str) -> str:
        """A keyed digest of a device or subscription identifier (``kind`` ``iccid``,
        ``modem``): the same value gives the same digest within a release (a SIM swap
        still shows), and nothing outside it without the key. 16 hex digits: 64 bits,
        no collision among a fleet's few thousand SIMs."""
        message = f"{kind}:{value}".encode()
        return f"{kind}-{hmac.new(self._identifier_key, message, hashlib.sha256).hexdigest()[:16]}"


def coarsen(lat: float, lon: float, grid_deg: float) -> tuple[float, float]:
    """The centre of the ``grid_deg`` cell that holds (lat, lon); 0 leaves them as they
    are. 0.01 degrees is about a kilometre of latitude."""
    if grid_deg < 0 or not math.isfinite(grid_deg):
        raise ValueError(f"a position grid is a positive number of degrees, not {grid_deg}")
    if grid_deg == 0:
        return lat, lon

    def snap(v: float) -> float:
        return round((math.floor(v / grid_deg) + 0.5) * grid_deg, 9)
    return snap(lat), snap(lon)
