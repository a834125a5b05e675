"""A release's key: its size and check, apart from the anonymisation that uses it.

Standard library only, so that ``testbed`` (whose ``dataset`` commands parse a key
file) starts on an orchestrator installed without the ``dataset`` extra, which brings
the Crypto-PAn implementation (:mod:`.anonymise`).
"""

from __future__ import annotations

#: Bytes of a release key: Crypto-PAn's AES-128 key and its 16-byte pad.
KEY_BYTES = 32


class BadKey(ValueError):
    """A release key of the wrong size."""


def check_key(key: bytes) -> bytes:
    if len(key) != KEY_BYTES:
        raise BadKey(f"a release key is {KEY_BYTES} bytes, not {len(key)}: make one with "
                        "`head -c 32 /dev/urandom > release.key` and keep it unpublished")
    return key
