from statestore.rpc import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionMove(_message.Message):
    __slots__ = ("partition", "query", "to_executor")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TO_EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    partition: str
    query: str
    to_executor: str
    def __init__(self, partition: _Optional[str] = ..., query: _Optional[str] = ..., to_executor: _Optional[str] = ...) -> None: ...

class MoveRequest(_message.Message):
    __slots__ = ("moves", "strategy")
    MOVES_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    moves: _containers.RepeatedCompositeFieldContainer[PartitionMove]
    strategy: str
    def __init__(self, moves: _Optional[_Iterable[_Union[PartitionMove, _Mapping]]] = ..., strategy: _Optional[str] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("executor", "strategy")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    executor: str
    strategy: str
    def __init__(self, executor: _Optional[str] = ..., strategy: _Optional[str] = ...) -> None: ...

class RebalanceRequest(_message.Message):
    __slots__ = ("strategy", "dry_run")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    dry_run: bool
    def __init__(self, strategy: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class OperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: int
    def __init__(self, operation_id: _Optional[int] = ...) -> None: ...

class HandOverStatus(_message.Message):
    __slots__ = ("partition", "source_node", "target_node", "target_executor", "final_group", "step", "batch", "steered_at_version", "effective_version", "attempts", "load_source", "loaded_from_version", "load_millis", "seconds_to_promote", "seconds", "log", "error", "source_after", "waiting_for")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    FINAL_GROUP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    STEERED_AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOADED_FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOAD_MILLIS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_TO_PROMOTE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AFTER_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    partition: str
    source_node: str
    target_node: str
    target_executor: str
    final_group: _containers.RepeatedScalarFieldContainer[str]
    step: str
    batch: int
    steered_at_version: int
    effective_version: int
    attempts: int
    load_source: str
    loaded_from_version: int
    load_millis: int
    seconds_to_promote: float
    seconds: float
    log: _containers.RepeatedScalarFieldContainer[str]
    error: str
    source_after: str
    waiting_for: str
    def __init__(self, partition: _Optional[str] = ..., source_node: _Optional[str] = ..., target_node: _Optional[str] = ..., target_executor: _Optional[str] = ..., final_group: _Optional[_Iterable[str]] = ..., step: _Optional[str] = ..., batch: _Optional[int] = ..., steered_at_version: _Optional[int] = ..., effective_version: _Optional[int] = ..., attempts: _Optional[int] = ..., load_source: _Optional[str] = ..., loaded_from_version: _Optional[int] = ..., load_millis: _Optional[int] = ..., seconds_to_promote: _Optional[float] = ..., seconds: _Optional[float] = ..., log: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., source_after: _Optional[str] = ..., waiting_for: _Optional[str] = ...) -> None: ...

class OperationStatus(_message.Message):
    __slots__ = ("operation_id", "kind", "strategy", "state", "moves", "batches", "batch", "error", "seconds", "notes")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    operation_id: int
    kind: str
    strategy: str
    state: str
    moves: _containers.RepeatedCompositeFieldContainer[HandOverStatus]
    batches: int
    batch: int
    error: str
    seconds: float
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, operation_id: _Optional[int] = ..., kind: _Optional[str] = ..., strategy: _Optional[str] = ..., state: _Optional[str] = ..., moves: _Optional[_Iterable[_Union[HandOverStatus, _Mapping]]] = ..., batches: _Optional[int] = ..., batch: _Optional[int] = ..., error: _Optional[str] = ..., seconds: _Optional[float] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class LocateReply(_message.Message):
    __slots__ = ("holders", "primary")
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    holders: _containers.RepeatedCompositeFieldContainer[Holder]
    primary: Holder
    def __init__(self, holders: _Optional[_Iterable[_Union[Holder, _Mapping]]] = ..., primary: _Optional[_Union[Holder, _Mapping]] = ...) -> None: ...

class Holder(_message.Message):
    __slots__ = ("node", "version")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    node: NodeRef
    version: int
    def __init__(self, node: _Optional[_Union[NodeRef, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class NodeRef(_message.Message):
    __slots__ = ("node_id", "address", "rack", "executor_id", "executor_host", "executor_cores")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_HOST_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_CORES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    rack: str
    executor_id: str
    executor_host: str
    executor_cores: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., rack: _Optional[str] = ..., executor_id: _Optional[str] = ..., executor_host: _Optional[str] = ..., executor_cores: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: NodeRef
    def __init__(self, node: _Optional[_Union[NodeRef, _Mapping]] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("replication_factor", "heartbeat_interval_seconds")
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    replication_factor: int
    heartbeat_interval_seconds: float
    def __init__(self, replication_factor: _Optional[int] = ..., heartbeat_interval_seconds: _Optional[float] = ...) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("node_id", "acked_version", "lag_bytes")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACKED_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    acked_version: int
    lag_bytes: int
    def __init__(self, node_id: _Optional[str] = ..., acked_version: _Optional[int] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class PrimaryReport(_message.Message):
    __slots__ = ("store", "version", "replicas", "seconds_since_commit", "increment_bytes", "last_load", "place", "load")
    STORE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_SINCE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    INCREMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_LOAD_FIELD_NUMBER: _ClassVar[int]
    PLACE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaProgress]
    seconds_since_commit: float
    increment_bytes: int
    last_load: LoadReport
    place: SparkPlace
    load: PartitionLoad
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaProgress, _Mapping]]] = ..., seconds_since_commit: _Optional[float] = ..., increment_bytes: _Optional[int] = ..., last_load: _Optional[_Union[LoadReport, _Mapping]] = ..., place: _Optional[_Union[SparkPlace, _Mapping]] = ..., load: _Optional[_Union[PartitionLoad, _Mapping]] = ...) -> None: ...

class PartitionLoad(_message.Message):
    __slots__ = ("task_millis", "rows_written", "state_bytes", "batches")
    TASK_MILLIS_FIELD_NUMBER: _ClassVar[int]
    ROWS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    task_millis: float
    rows_written: float
    state_bytes: int
    batches: int
    def __init__(self, task_millis: _Optional[float] = ..., rows_written: _Optional[float] = ..., state_bytes: _Optional[int] = ..., batches: _Optional[int] = ...) -> None: ...

class LoadReport(_message.Message):
    __slots__ = ("source", "version", "from_version", "versions_applied", "millis", "seconds_ago", "bytes_local_files", "bytes_replica_files", "bytes_checkpoint")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    MILLIS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_AGO_FIELD_NUMBER: _ClassVar[int]
    BYTES_LOCAL_FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_REPLICA_FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    source: str
    version: int
    from_version: int
    versions_applied: int
    millis: int
    seconds_ago: float
    bytes_local_files: int
    bytes_replica_files: int
    bytes_checkpoint: int
    def __init__(self, source: _Optional[str] = ..., version: _Optional[int] = ..., from_version: _Optional[int] = ..., versions_applied: _Optional[int] = ..., millis: _Optional[int] = ..., seconds_ago: _Optional[float] = ..., bytes_local_files: _Optional[int] = ..., bytes_replica_files: _Optional[int] = ..., bytes_checkpoint: _Optional[int] = ...) -> None: ...

class SparkPlace(_message.Message):
    __slots__ = ("run_id", "state_root", "executor_id", "executor_host")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_ROOT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_HOST_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state_root: str
    executor_id: str
    executor_host: str
    def __init__(self, run_id: _Optional[str] = ..., state_root: _Optional[str] = ..., executor_id: _Optional[str] = ..., executor_host: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node", "primaries", "replicas_held", "opened_ahead", "opens_ahead", "groups_epoch", "reports_epoch", "rocksdb_memory_bytes", "open_files")
    NODE_FIELD_NUMBER: _ClassVar[int]
    PRIMARIES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_HELD_FIELD_NUMBER: _ClassVar[int]
    OPENED_AHEAD_FIELD_NUMBER: _ClassVar[int]
    OPENS_AHEAD_FIELD_NUMBER: _ClassVar[int]
    GROUPS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPORTS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ROCKSDB_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    node: NodeRef
    primaries: _containers.RepeatedCompositeFieldContainer[PrimaryReport]
    replicas_held: _containers.RepeatedCompositeFieldContainer[_common_pb2.VersionHeld]
    opened_ahead: _containers.RepeatedCompositeFieldContainer[_common_pb2.VersionHeld]
    opens_ahead: bool
    groups_epoch: int
    reports_epoch: int
    rocksdb_memory_bytes: int
    open_files: int
    def __init__(self, node: _Optional[_Union[NodeRef, _Mapping]] = ..., primaries: _Optional[_Iterable[_Union[PrimaryReport, _Mapping]]] = ..., replicas_held: _Optional[_Iterable[_Union[_common_pb2.VersionHeld, _Mapping]]] = ..., opened_ahead: _Optional[_Iterable[_Union[_common_pb2.VersionHeld, _Mapping]]] = ..., opens_ahead: _Optional[bool] = ..., groups_epoch: _Optional[int] = ..., reports_epoch: _Optional[int] = ..., rocksdb_memory_bytes: _Optional[int] = ..., open_files: _Optional[int] = ...) -> None: ...

class ReplicaGroup(_message.Message):
    __slots__ = ("store", "primary_node", "replicas")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_NODE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    primary_node: str
    replicas: _containers.RepeatedCompositeFieldContainer[NodeRef]
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., primary_node: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[NodeRef, _Mapping]]] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("groups", "demoted", "retired_replicas", "incoming", "groups_epoch", "reports_epoch")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DEMOTED_FIELD_NUMBER: _ClassVar[int]
    RETIRED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    INCOMING_FIELD_NUMBER: _ClassVar[int]
    GROUPS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPORTS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    demoted: _containers.RepeatedCompositeFieldContainer[_common_pb2.VersionHeld]
    retired_replicas: _containers.RepeatedCompositeFieldContainer[_common_pb2.StoreRef]
    incoming: _containers.RepeatedCompositeFieldContainer[_common_pb2.StoreRef]
    groups_epoch: int
    reports_epoch: int
    def __init__(self, groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., demoted: _Optional[_Iterable[_Union[_common_pb2.VersionHeld, _Mapping]]] = ..., retired_replicas: _Optional[_Iterable[_Union[_common_pb2.StoreRef, _Mapping]]] = ..., incoming: _Optional[_Iterable[_Union[_common_pb2.StoreRef, _Mapping]]] = ..., groups_epoch: _Optional[int] = ..., reports_epoch: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node", "alive", "seconds_since_heartbeat", "primaries", "replicas", "load_millis", "load_per_core", "rocksdb_memory_bytes", "open_files")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_SINCE_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PRIMARIES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LOAD_MILLIS_FIELD_NUMBER: _ClassVar[int]
    LOAD_PER_CORE_FIELD_NUMBER: _ClassVar[int]
    ROCKSDB_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    node: NodeRef
    alive: bool
    seconds_since_heartbeat: float
    primaries: int
    replicas: int
    load_millis: float
    load_per_core: float
    rocksdb_memory_bytes: int
    open_files: int
    def __init__(self, node: _Optional[_Union[NodeRef, _Mapping]] = ..., alive: _Optional[bool] = ..., seconds_since_heartbeat: _Optional[float] = ..., primaries: _Optional[int] = ..., replicas: _Optional[int] = ..., load_millis: _Optional[float] = ..., load_per_core: _Optional[float] = ..., rocksdb_memory_bytes: _Optional[int] = ..., open_files: _Optional[int] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("node_id", "version_held", "lag_versions", "lag_bytes")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_HELD_FIELD_NUMBER: _ClassVar[int]
    LAG_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    version_held: int
    lag_versions: int
    lag_bytes: int
    def __init__(self, node_id: _Optional[str] = ..., version_held: _Optional[int] = ..., lag_versions: _Optional[int] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class PartitionStatus(_message.Message):
    __slots__ = ("store", "primary_node", "primary_version", "replicas", "increment_bytes", "state_bytes", "last_load", "steered_to", "load")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_NODE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    INCREMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_LOAD_FIELD_NUMBER: _ClassVar[int]
    STEERED_TO_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    store: _common_pb2.StoreRef
    primary_node: str
    primary_version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    increment_bytes: int
    state_bytes: int
    last_load: LoadReport
    steered_to: str
    load: PartitionLoad
    def __init__(self, store: _Optional[_Union[_common_pb2.StoreRef, _Mapping]] = ..., primary_node: _Optional[str] = ..., primary_version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., increment_bytes: _Optional[int] = ..., state_bytes: _Optional[int] = ..., last_load: _Optional[_Union[LoadReport, _Mapping]] = ..., steered_to: _Optional[str] = ..., load: _Optional[_Union[PartitionLoad, _Mapping]] = ...) -> None: ...

class PlacementStatus(_message.Message):
    __slots__ = ("total", "traffic", "load", "migration", "lower_bound", "replicas", "replans", "note", "repairs", "last_replan_seconds", "last_replan_groups")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REPLANS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    REPAIRS_FIELD_NUMBER: _ClassVar[int]
    LAST_REPLAN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_REPLAN_GROUPS_FIELD_NUMBER: _ClassVar[int]
    total: float
    traffic: float
    load: float
    migration: float
    lower_bound: float
    replicas: int
    replans: int
    note: str
    repairs: int
    last_replan_seconds: float
    last_replan_groups: int
    def __init__(self, total: _Optional[float] = ..., traffic: _Optional[float] = ..., load: _Optional[float] = ..., migration: _Optional[float] = ..., lower_bound: _Optional[float] = ..., replicas: _Optional[int] = ..., replans: _Optional[int] = ..., note: _Optional[str] = ..., repairs: _Optional[int] = ..., last_replan_seconds: _Optional[float] = ..., last_replan_groups: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("replication_factor", "nodes", "partitions", "placement", "operations")
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    replication_factor: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionStatus]
    placement: PlacementStatus
    operations: _containers.RepeatedCompositeFieldContainer[OperationStatus]
    def __init__(self, replication_factor: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionStatus, _Mapping]]] = ..., placement: _Optional[_Union[PlacementStatus, _Mapping]] = ..., operations: _Optional[_Iterable[_Union[OperationStatus, _Mapping]]] = ...) -> None: ...
