"""The wire primitives of the local channel's frames (docs/formats.md section 6), shared by the generated codec.

Big-endian integers, strings as `u16 length` + UTF-8, lineages of 16 bytes (ff x 16: not known). The frames
themselves, field by field, are generated from `protos/contract/local_channel.toml` into
`statestore.contract.local_channel_frames`.
"""

from __future__ import annotations

import struct

LINEAGE_BYTES = 16
UNKNOWN_LINEAGE = b"\xff" * LINEAGE_BYTES
# Largest value of a 64-bit field (versions, counts): the provider's Java longs are never negative.
MAX_U64_FIELD = 2**63 - 1

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEADER = struct.Struct(">IB")


class FrameError(Exception):
    """A frame that does not follow docs/formats.md section 6."""


class Reader:
    """Reads a frame's fields in order; every method raises FrameError on what the format does not allow."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._at = 0

    def take(self, n: int) -> bytes:
        """The next `n` bytes."""
        if self._at + n > len(self._body):
            raise FrameError(f"frame truncated: needs {self._at + n} bytes, has {len(self._body)}")
        chunk = self._body[self._at : self._at + n]
        self._at += n
        return chunk

    def u8(self) -> int:
        """An unsigned byte."""
        return self.take(1)[0]

    def u16(self) -> int:
        """A big-endian unsigned 16-bit integer."""
        return _U16.unpack(self.take(2))[0]

    def u32(self) -> int:
        """A big-endian unsigned 32-bit integer."""
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        """A big-endian 64-bit integer of at most 2^63-1."""
        value = _U64.unpack(self.take(8))[0]
        if value > MAX_U64_FIELD:
            # The provider writes Java longs, never negative; the node keeps them in protobuf int64 fields.
            raise FrameError(f"a 64-bit field holds {value}, over {MAX_U64_FIELD} (Java's Long.MAX_VALUE)")
        return value

    def lineage(self) -> bytes | None:
        """16 bytes of lineage, or None for ff x 16 (not known)."""
        value = self.take(LINEAGE_BYTES)
        return None if value == UNKNOWN_LINEAGE else value

    def string(self) -> str:
        """A `u16 length` + UTF-8 string."""
        try:
            return self.take(self.u16()).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"string is not UTF-8: {exc}") from exc

    def blob(self) -> bytes:
        """A `u32 length` + bytes field."""
        return self.take(self.u32())

    def bits(self, known: int) -> int:
        """A u8 of flag bits, every set bit among `known`."""
        flags = self.u8()
        if flags & ~known:
            raise FrameError(f"unknown flag bits {flags:#04x}")
        return flags

    def end(self) -> None:
        """Checks that every byte was read."""
        if self._at != len(self._body):
            raise FrameError(f"{len(self._body) - self._at} trailing bytes after the fields")


def pack_u8(value: int) -> bytes:
    """One unsigned byte."""
    return bytes((value,))


def pack_u16(value: int) -> bytes:
    """A big-endian unsigned 16-bit integer."""
    return _U16.pack(value)


def pack_u32(value: int) -> bytes:
    """A big-endian unsigned 32-bit integer."""
    return _U32.pack(value)


def pack_u64(value: int) -> bytes:
    """A big-endian unsigned 64-bit integer."""
    return _U64.pack(value)


def pack_str(value: str) -> bytes:
    """A `u16 length` + UTF-8 string."""
    data = value.encode("utf-8")
    return _U16.pack(len(data)) + data


def pack_blob(value: bytes) -> bytes:
    """A `u32 length` + bytes field."""
    return _U32.pack(len(value)) + value


def pack_lineage(value: bytes | None) -> bytes:
    """16 bytes of lineage (ff x 16 for None: not known)."""
    return UNKNOWN_LINEAGE if value is None else value


def frame(frame_type: int, fields: bytes) -> bytes:
    """A whole frame: `u32 length`, `u8 type`, then the fields."""
    return _HEADER.pack(len(fields) + 1, frame_type) + fields
