from statestore.rpc import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_STATUS_UNSPECIFIED: _ClassVar[AckStatus]
    ACK_APPLIED: _ClassVar[AckStatus]
    ACK_DUPLICATE: _ClassVar[AckStatus]
    ACK_BUFFERED: _ClassVar[AckStatus]
    ACK_REJECTED_CORRUPT: _ClassVar[AckStatus]
    ACK_FAILED: _ClassVar[AckStatus]
ACK_STATUS_UNSPECIFIED: AckStatus
ACK_APPLIED: AckStatus
ACK_DUPLICATE: AckStatus
ACK_BUFFERED: AckStatus
ACK_REJECTED_CORRUPT: AckStatus
ACK_FAILED: AckStatus

class ReleaseResult(_message.Message):
    __slots__ = ("was_primary",)
    WAS_PRIMARY_FIELD_NUMBER: _ClassVar[int]
    was_primary: bool
    def __init__(self, was_primary: _Optional[bool] = ...) -> None: ...

class ShipRequest(_message.Message):
    __slots__ = ("increment", "primary_address")
    INCREMENT_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    increment: _common_pb2.IncrementBlob
    primary_address: str
    def __init__(self, increment: _Optional[_Union[_common_pb2.IncrementBlob, _Mapping]] = ..., primary_address: _Optional[str] = ...) -> None: ...

class ShipAck(_message.Message):
    __slots__ = ("held", "version", "status", "replica_node", "detail")
    HELD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    held: _common_pb2.VersionHeld
    version: int
    status: AckStatus
    replica_node: str
    detail: str
    def __init__(self, held: _Optional[_Union[_common_pb2.VersionHeld, _Mapping]] = ..., version: _Optional[int] = ..., status: _Optional[_Union[AckStatus, str]] = ..., replica_node: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("store", "from_version", "to_version")
    STORE_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    from_version: int
    to_version: int
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ...) -> None: ...

class BootstrapRequest(_message.Message):
    __slots__ = ("store", "bytes_per_second", "chunk_bytes", "replica_only", "at_most")
    STORE_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ONLY_FIELD_NUMBER: _ClassVar[int]
    AT_MOST_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    bytes_per_second: int
    chunk_bytes: int
    replica_only: bool
    at_most: int
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., bytes_per_second: _Optional[int] = ..., chunk_bytes: _Optional[int] = ..., replica_only: _Optional[bool] = ..., at_most: _Optional[int] = ...) -> None: ...

class SnapshotFileInfo(_message.Message):
    __slots__ = ("name", "size", "crc32")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    crc32: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., crc32: _Optional[int] = ...) -> None: ...

class SnapshotStart(_message.Message):
    __slots__ = ("store_id", "version", "total_bytes", "files")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    version: int
    total_bytes: int
    files: _containers.RepeatedCompositeFieldContainer[SnapshotFileInfo]
    def __init__(self, store_id: _Optional[str] = ..., version: _Optional[int] = ..., total_bytes: _Optional[int] = ..., files: _Optional[_Iterable[_Union[SnapshotFileInfo, _Mapping]]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("name", "offset", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    data: bytes
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("start", "file")
    START_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    start: SnapshotStart
    file: FileChunk
    def __init__(self, start: _Optional[_Union[SnapshotStart, _Mapping]] = ..., file: _Optional[_Union[FileChunk, _Mapping]] = ...) -> None: ...

class ShipCommand(_message.Message):
    __slots__ = ("increment", "sync", "sync_timeout_seconds")
    INCREMENT_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    SYNC_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    increment: _common_pb2.IncrementBlob
    sync: bool
    sync_timeout_seconds: float
    def __init__(self, increment: _Optional[_Union[_common_pb2.IncrementBlob, _Mapping]] = ..., sync: _Optional[bool] = ..., sync_timeout_seconds: _Optional[float] = ...) -> None: ...

class ReplicaAck(_message.Message):
    __slots__ = ("node_id", "acked_version")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACKED_VERSION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    acked_version: int
    def __init__(self, node_id: _Optional[str] = ..., acked_version: _Optional[int] = ...) -> None: ...

class ShipResult(_message.Message):
    __slots__ = ("version", "replicas", "synced", "detail")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaAck]
    synced: bool
    detail: str
    def __init__(self, version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaAck, _Mapping]]] = ..., synced: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class FileCopyHeader(_message.Message):
    __slots__ = ("store", "checkpoint_path", "name", "size", "crc32", "version", "modified_ms")
    STORE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_MS_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    checkpoint_path: str
    name: str
    size: int
    crc32: int
    version: int
    modified_ms: int
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., checkpoint_path: _Optional[str] = ..., name: _Optional[str] = ..., size: _Optional[int] = ..., crc32: _Optional[int] = ..., version: _Optional[int] = ..., modified_ms: _Optional[int] = ...) -> None: ...

class FileCopyChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: FileCopyHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[FileCopyHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class FilesRequest(_message.Message):
    __slots__ = ("store", "from_version", "held_ssts")
    STORE_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    HELD_SSTS_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    from_version: int
    held_ssts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., from_version: _Optional[int] = ..., held_ssts: _Optional[_Iterable[str]] = ...) -> None: ...

class FileCopyKept(_message.Message):
    __slots__ = ("kept", "detail", "claimed_here")
    KEPT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_HERE_FIELD_NUMBER: _ClassVar[int]
    kept: bool
    detail: str
    claimed_here: bool
    def __init__(self, kept: _Optional[bool] = ..., detail: _Optional[str] = ..., claimed_here: _Optional[bool] = ...) -> None: ...
