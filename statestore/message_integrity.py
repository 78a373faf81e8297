"""A checksum of a gRPC message carried in the call's metadata, so that a message whose bytes changed on the way
and still parse (a flipped byte inside a string field) is refused rather than believed.

TCP's 16-bit checksum misses some corruptions and plain-text gRPC adds none (TLS would catch them). On the
controller link that mattered: a node's heartbeat with one byte of a checkpoint location changed registered a
partition no query has, and an operator's rebalance then planned a move of it. The sender puts the CRC-32 of the
message's deterministic serialization under `CHECKSUM_KEY`; the receiver serializes what it parsed the same way
and compares. A call without the key (an older client, a test's own stub) is taken as it is.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from google.protobuf.message import Message

CHECKSUM_KEY = "x-statestore-crc32"


def checksum(message: Message) -> str:
    """The CRC-32 of `message`'s deterministic serialization, in hex."""
    return f"{zlib.crc32(message.SerializeToString(deterministic=True)):08x}"


def checksum_metadata(message: Message) -> tuple[tuple[str, str]]:
    """Call metadata carrying `message`'s checksum."""
    return ((CHECKSUM_KEY, checksum(message)),)


def arrived_intact(message: Message, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
    """Whether `message` matches the checksum its call's metadata carries (True when it carries none)."""
    sent = dict(metadata or ()).get(CHECKSUM_KEY)
    return sent is None or sent == checksum(message)
