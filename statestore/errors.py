"""Errors of the engine. Each names the store or file and the problem, so an operator can act on it."""

from __future__ import annotations


class StateStoreError(Exception):
    """Base of every error this package raises on purpose."""


class CorruptFileError(StateStoreError):
    """A checkpoint file (increment, snapshot file or manifest) is damaged or not what it claims to be."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class UnsupportedFormatError(CorruptFileError):
    """A checkpoint file written in a format version this code does not know."""


class MissingCheckpointFileError(StateStoreError):
    """A file needed to restore a version is not in the checkpoint location."""

    def __init__(self, path: str, needed_for: str) -> None:
        super().__init__(f"{path}: missing, needed {needed_for}")
        self.path = path


class VersionMismatchError(StateStoreError):
    """An operation needs the store at one version and found it at another."""

    def __init__(self, store_id: str, expected: int, found: int, what: str) -> None:
        super().__init__(f"store {store_id!r}: {what} needs version {expected}, store is at version {found}")
        self.store_id = store_id
        self.expected = expected
        self.found = found


class StoreIdentityError(StateStoreError):
    """Data that belongs to another store partition."""

    def __init__(self, store_id: str, other_store_id: str, what: str) -> None:
        super().__init__(f"store {store_id!r}: {what} belongs to store {other_store_id!r}")
        self.store_id = store_id
        self.other_store_id = other_store_id


class StoreWriteError(StateStoreError):
    """Writing failed (disk full, I/O error); the store stays at its last committed version."""


class UnknownColumnFamilyError(StateStoreError):
    """A column family that does not exist in the store."""


class LineageMismatchError(StateStoreError):
    """An increment whose parent is not the history the store holds: the store followed an abandoned
    history (Spark re-ran a batch), or the increment belongs to one."""

    def __init__(self, store_id: str, version: int, held: bytes | None, parent: bytes | None, what: str) -> None:
        super().__init__(
            f"store {store_id!r}: {what} continues lineage {_hex(parent)}, the store at version {version} holds "
            f"lineage {_hex(held)}"
        )
        self.store_id = store_id
        self.version = version


def _hex(lineage: bytes | None) -> str:
    return "unknown" if lineage is None else lineage.hex()
