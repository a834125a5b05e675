"""A tar reader for untrusted archives that never holds more than a block and a cap.

Python's ``tarfile`` reads a GNU long name (``L``/``K``) or a pax header (``x``/``g``)
whole, at the size its header declares, before any caller can look: a 1 MB gzip'd tar
declaring a 1 GiB long name costs a GiB. This reader walks the 512-byte headers itself,
refuses an extended header over ``max_extended_bytes`` before reading it, and hands out
member data only in chunks (a gzip stream is decompressed as it is read, so a zip bomb
costs time, never memory). It knows what bundles need: regular files and folders (with
GNU and pax long names, base-256 sizes, ustar prefixes); other kinds are reported for
the caller to refuse.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, cast

from testbed_common.untrusted import BundleError

BLOCK = 512
#: Member data is handed out in pieces of this size (bytes).
CHUNK = 64 * 1024
#: Long-name and pax headers allowed in front of one member (a member needs at most two).
MAX_EXTENDED_PER_MEMBER = 4

REGULAR = frozenset({b"0", b"\x00", b"7"})  # '7' (contiguous) is a regular file, as in tarfile
DIRECTORY = b"5"
GNU_LONGNAME, GNU_LONGLINK, PAX, PAX_GLOBAL = b"L", b"K", b"x", b"g"
_POSIX_MAGIC = b"ustar\x0000"
#: Kinds whose size field does not count data blocks (folders, links, devices, fifos),
#: as tarfile reads them.
_NO_DATA = frozenset({DIRECTORY, b"1", b"2", b"3", b"4", b"6"})


@dataclass(frozen=True)
class TarMember:
    name: str
    kind: bytes  # the header's type flag
    size: int
    linkname: str

    @property
    def isfile(self) -> bool:
        return self.kind in REGULAR

    @property
    def isdir(self) -> bool:
        return self.kind == DIRECTORY


def open_decompressed(raw: IO[bytes]) -> IO[bytes]:
    """``raw`` itself (a plain tar) or a gzip stream over it, by its magic bytes."""
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    return raw


def _read_exact(stream: IO[bytes], n: int, what: str) -> bytes:
    try:
        data = stream.read(n)
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise BundleError(f"bundle is corrupt ({what}): {e}") from e
    if len(data) != n:
        raise BundleError(f"bundle is truncated ({what})")
    return data


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _number(field: bytes, what: str) -> int:
    if field[:1] == b"\x80":  # GNU base-256, for sizes past 8 GiB
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise BundleError(f"bundle header: negative {what}")
    text = field.split(b"\x00", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError as e:
        raise BundleError(f"bundle header: {what} {field!r} is not a number") from e


def _text(field: bytes, what: str) -> str:
    try:
        return field.split(b"\x00", 1)[0].decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(f"bundle header: {what} is not UTF-8") from e


def _check_sum(block: bytes, offset: int) -> None:
    stored = _number(block[148:156], "checksum")
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = unsigned - sum(b for b in block[:148] + block[156:] if b > 127) * 2
    if stored not in (unsigned, signed):
        raise BundleError(f"bundle header at byte {offset} is damaged (checksum); "
                          "not a tar archive, or corrupt")


def _pax_records(data: bytes) -> dict[str, str]:
    """The ``"%d %s=%s\\n"`` records of a pax header."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\x00":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError as e:
            raise BundleError("bundle pax header: malformed record length") from e
        record = data[space + 1:pos + length]
        if length <= 0 or space < 0 or not record.endswith(b"\n") or b"=" not in record:
            raise BundleError("bundle pax header: malformed record")
        key, value = record[:-1].split(b"=", 1)
        try:
            out[key.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BundleError("bundle pax header: a record is not UTF-8") from e
        pos += length
    return out


class TarReader:
    """Iterate over the members of a (decompressed) tar stream; :meth:`chunks` reads
    the current member's data. Whatever a caller leaves unread is skipped in chunks."""

    def __init__(self, stream: IO[bytes], *, max_extended_bytes: int = 64 * 1024,
                 max_bytes: int | None = None, stored_bytes: int = 0) -> None:
        """``max_bytes``: the most bytes of tar read from ``stream`` (what a gzip layer
        may decompress to), checked before each read; ``stored_bytes``: the size of
        what ``stream`` decompresses, for the message."""
        self._stream = stream
        self._max_extended = max_extended_bytes
        self.max_bytes = max_bytes
        self.stored_bytes = stored_bytes
        self._offset = 0  # bytes of tar consumed, for messages
        self._left = 0  # unread data bytes of the current member
        self._pad = 0

    def _budget(self, n: int) -> None:
        if self.max_bytes is not None and self._offset + n > self.max_bytes:
            raise BundleError(
                f"bundle decompresses to more than {self.max_bytes} bytes from "
                f"{self.stored_bytes} stored bytes: refused as a compression bomb")

    def _read(self, n: int, what: str) -> bytes:
        self._budget(n)
        data = _read_exact(self._stream, n, what)
        self._offset += n
        return data

    def _skip_rest(self) -> None:
        for _ in self.chunks():
            pass
        if self._pad:
            self._read(self._pad, "padding")
            self._pad = 0

    def chunks(self) -> Iterator[bytes]:
        """The current member's data, :data:`CHUNK` bytes at a time."""
        while self._left:
            n = min(CHUNK, self._left)
            block = self._read(n, "member data")
            self._left -= n
            yield block

    def _extended(self, size: int, kind: bytes) -> bytes:
        if size > self._max_extended:
            label = "long name" if kind in (GNU_LONGNAME, GNU_LONGLINK) else "pax header"
            raise BundleError(
                f"bundle header at byte {self._offset - BLOCK} declares a {size}-byte "
                f"{label}; at most {self._max_extended} bytes are accepted"
            )
        return self._read(_padded(size), "extended header")[:size]

    def __iter__(self) -> Iterator[TarMember]:
        while True:
            self._skip_rest()
            member = self._next()
            if member is None:
                return
            self._left, self._pad = member.size, _padded(member.size) - member.size
            yield member

    def _next(self) -> TarMember | None:
        long_name = long_link = None
        pax: dict[str, str] = {}
        for _ in range(MAX_EXTENDED_PER_MEMBER + 1):
            self._budget(BLOCK)
            try:
                block = self._stream.read(BLOCK)
            except (OSError, EOFError) as e:
                raise BundleError(f"bundle is corrupt (header): {e}") from e
            if not block or block == bytes(BLOCK):
                return None  # end of archive (a zero block, or a clean end of stream)
            if len(block) != BLOCK:
                raise BundleError("bundle is truncated (header)")
            _check_sum(block, self._offset)
            self._offset += BLOCK
            kind = block[156:157]
            size = _number(block[124:136], "size")
            if kind in (GNU_LONGNAME, GNU_LONGLINK):
                value = _text(self._extended(size, kind), "long name")
                long_name, long_link = ((value, long_link) if kind == GNU_LONGNAME
                                        else (long_name, value))
                continue
            if kind in (PAX, PAX_GLOBAL):
                records = _pax_records(self._extended(size, kind))
                if any(k.startswith("GNU.sparse") for k in records):
                    raise BundleError("bundle holds a sparse file; only regular files are "
                                      "allowed")
                if kind == PAX:
                    pax.update(records)
                elif {"path", "size", "linkpath"} & records.keys():
                    raise BundleError("bundle has a global pax header that sets a path or "
                                      "size; refused")
                continue
            return self._member(block, kind, size, long_name, long_link, pax)
        raise BundleError(f"bundle has more than {MAX_EXTENDED_PER_MEMBER} extended headers "
                          "in a row")

    @staticmethod
    def _member(block: bytes, kind: bytes, size: int, long_name: str | None,
                long_link: str | None, pax: dict[str, str]) -> TarMember:
        name = _text(block[0:100], "name")
        if block[257:265] == _POSIX_MAGIC and block[345:346] != b"\x00":
            name = f"{_text(block[345:500], 'name prefix')}/{name}"
        name = pax.get("path", long_name or name)
        linkname = pax.get("linkpath", long_link or _text(block[157:257], "link name"))
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError as e:
                raise BundleError("bundle pax header: size is not a number") from e
        if kind == b"\x00" and name.endswith("/"):
            kind = DIRECTORY
        if kind in _NO_DATA:
            size = 0
        if size < 0:
            raise BundleError(f"bundle member {name!r}: negative size")
        return TarMember(name=name, kind=kind, size=size, linkname=linkname)
