from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoreRef(_message.Message):
    __slots__ = ("store_id", "checkpoint_dir")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    checkpoint_dir: str
    def __init__(self, store_id: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ...) -> None: ...

class IncrementBlob(_message.Message):
    __slots__ = ("store", "version", "base_version", "data", "rewrites_history")
    STORE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    REWRITES_HISTORY_FIELD_NUMBER: _ClassVar[int]
    store: StoreRef
    version: int
    base_version: int
    data: bytes
    rewrites_history: bool
    def __init__(self, store: _Optional[_Union[StoreRef, _Mapping]] = ..., version: _Optional[int] = ..., base_version: _Optional[int] = ..., data: _Optional[bytes] = ..., rewrites_history: _Optional[bool] = ...) -> None: ...

class VersionHeld(_message.Message):
    __slots__ = ("store", "version", "size_bytes")
    STORE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    store: StoreRef
    version: int
    size_bytes: int
    def __init__(self, store: _Optional[_Union[StoreRef, _Mapping]] = ..., version: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...
