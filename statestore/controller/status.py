"""The cluster's status: nodes, partitions, replica groups, versions held and lag; and its table form."""

from __future__ import annotations

from handover.failover import Failover
from statestore.cluster.membership import Membership
from statestore.controller.load import executor_loads
from statestore.controller.placement_inputs import demand_of
from statestore.controller.replica_groups import ReplicaGroups
from statestore.partition_key import query_root
from statestore.rpc import control_pb2


def build_status(
    membership: Membership, chooser: ReplicaGroups, q: int, failover: Failover | None = None
) -> control_pb2.StatusReply:
    """The Status answer."""
    plan = chooser.current()
    reply = control_pb2.StatusReply(
        replication_factor=q,
        placement=control_pb2.PlacementStatus(
            total=plan.cost.total,
            traffic=plan.cost.traffic,
            load=plan.cost.load,
            migration=plan.cost.migration,
            lower_bound=plan.lower_bound,
            replicas=plan.replicas,
            replans=chooser.replans,
            note=plan.note,
            repairs=chooser.repairs,
            last_replan_seconds=chooser.last_replan_seconds,
            last_replan_groups=chooser.last_replan_groups,
        ),
    )
    records = membership.nodes()
    loads = executor_loads(membership)
    for record in records:
        load = loads.get(record.node_id)
        reply.nodes.append(
            control_pb2.NodeStatus(
                node=control_pb2.NodeRef(
                    node_id=record.node_id,
                    address=record.address,
                    executor_id=record.executor_id,
                    executor_host=record.executor_host,
                    executor_cores=record.executor_cores,
                ),
                alive=membership.is_alive(record),
                seconds_since_heartbeat=membership.seconds_since(record),
                primaries=len(record.primaries),
                replicas=len(record.replicas_held),
                load_millis=load.millis if load else 0.0,
                load_per_core=load.per_core if load else 0.0,
                rocksdb_memory_bytes=record.rocksdb_memory_bytes,
                open_files=record.open_files,
            )
        )
    by_id = {r.node_id: r for r in records}
    for partition in membership.partitions():
        key = partition.key
        report = partition.report
        acked = {p.node_id: p for p in report.replicas}
        demand = demand_of(partition, membership.state_bytes(key))
        status = control_pb2.PartitionStatus(
            store=partition.store,
            primary_node=partition.primary,
            primary_version=report.version,
            increment_bytes=demand.increment_bytes,
            state_bytes=demand.size_bytes,
            steered_to=failover.steered(key) if failover is not None else "",
        )
        if report.HasField("last_load"):
            status.last_load.CopyFrom(report.last_load)
        if report.HasField("load"):
            status.load.CopyFrom(report.load)
        for node_id in chooser.choose_replica_group(key, partition.primary, plan):
            record = by_id.get(node_id)
            held = record.replicas_held.get(key, 0) if record else 0
            progress = acked.get(node_id)
            if progress is not None:
                held = max(held, progress.acked_version)
            status.replicas.append(
                control_pb2.ReplicaStatus(
                    node_id=node_id,
                    version_held=held,
                    lag_versions=max(report.version - held, 0),
                    lag_bytes=replica_lag_bytes(report.version, held, progress, report.increment_bytes),
                )
            )
        reply.partitions.append(status)
    return reply


def replica_lag_bytes(
    version: int, held: int, progress: control_pb2.ReplicaProgress | None, mean_increment_bytes: int
) -> int:
    """Bytes a replica holding `held` still lacks of its primary's `version`.

    The primary knows the bytes after the version its replica last acknowledged. A replica often reports holding
    more than that (its own report outruns the ack, or a replica caught up through a bootstrap): then the bytes
    after `held` are that figure's share for the versions still missing. With no ack at all, the primary's mean
    increment times the versions missing (0 when no mean is known yet).
    """
    if held >= version:
        return 0
    missing = version - held
    if progress is None or progress.acked_version >= version:
        return missing * max(mean_increment_bytes, 0)
    if progress.acked_version >= held:
        return progress.lag_bytes
    return progress.lag_bytes * missing // (version - progress.acked_version)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def format_status(reply: control_pb2.StatusReply) -> str:
    """The status as two plain-text tables: nodes, then partitions with one row per replica."""
    nodes = [
        [
            n.node.node_id,
            n.node.address,
            f"{n.node.executor_id}@{n.node.executor_host}" if n.node.executor_host else "-",
            "alive" if n.alive else "dead",
            f"{n.seconds_since_heartbeat:.1f}s",
            str(n.primaries),
            str(n.replicas),
            _executor_load(n),
            f"{n.rocksdb_memory_bytes / (1 << 20):.0f} MiB" if n.rocksdb_memory_bytes else "-",
            str(n.open_files) if n.open_files else "-",
        ]
        for n in reply.nodes
    ]
    roots = sorted({query_root(p.store.checkpoint_dir) for p in reply.partitions})
    several = len(roots) > 1  # two queries share store ids: tell their partitions apart by checkpoint root
    partitions = []
    for p in reply.partitions:
        replicas = list(p.replicas) or [None]
        for index, r in enumerate(replicas):
            partitions.append(
                ([query_root(p.store.checkpoint_dir)] if several else [])
                + [
                    p.store.store_id,
                    p.primary_node,
                    str(p.primary_version),
                    f"{p.load.task_millis:.0f} ms" if index == 0 and p.HasField("load") else "",
                    describe_load(p.last_load) if index == 0 and p.HasField("last_load") else "",
                    r.node_id if r else "-",
                    str(r.version_held) if r else "-",
                    str(r.lag_versions) if r else "-",
                    str(r.lag_bytes) if r else "-",
                ]
            )
    steered = [f"{p.store.store_id}: steered to {p.steered_to}" for p in reply.partitions if p.steered_to]
    cost = reply.placement
    placement = (
        f"placement: cost {cost.total:.4g} = traffic {cost.traffic:.4g} + load {cost.load:.4g} + migration "
        f"{cost.migration:.4g} (byte-hops; lower bound {cost.lower_bound:.4g}), {cost.replicas} replica(s) "
        f"per partition, {cost.replans} re-plan(s)"
        + (
            f" ({cost.repairs} of them repairs), the last {cost.last_replan_seconds * 1000:.0f} ms for "
            f"{cost.last_replan_groups} group(s)"
            if cost.replans
            else ""
        )
        + (f"\nnote: {cost.note}" if cost.note else "")
    )
    return (
        f"replication factor q={reply.replication_factor}\n{placement}\n\nNODES\n"
        + _table(
            ["node", "address", "executor", "state", "last heartbeat", "primaries", "replicas", "load/batch",
             "rocksdb memory", "open files"],
            nodes,
        )
        + "\n\nPARTITIONS"
        + (f" of the query checkpointed at {roots[0]}" if len(roots) == 1 else "")
        + "\n"
        + _table(
            (["query"] if several else [])
            + ["partition", "primary", "version", "task/batch", "loaded from", "replica", "held", "lag versions",
               "lag bytes"],
            partitions,
        )
        + ("\n\nFAILOVER\n" + "\n".join(steered) if steered else "")
        + _operations(reply)
    )


_AUTOMATIC = ("automatic", "Spark is decommissioning")


def _operations(reply: control_pb2.StatusReply) -> str:
    """The operator commands' section: the running one with every move's steps, the others in one line each."""
    if not reply.operations:
        return ""
    from statestore.controller.operator_cli import format_operation

    blocks = []
    for operation in reply.operations:
        if operation.state == "running":
            block = format_operation(operation)
            for move in operation.moves:
                if move.step not in ("done", "failed"):
                    block += "\n" + "\n".join(f"    {move.partition} {line}" for line in move.log)
            blocks.append(block)
        else:
            blocks.append(format_operation(operation).splitlines()[0])
        # An automatic operation says why it was started (the load-balancing policy's reason, Spark's decommission).
        blocks.extend(f"    why: {note}" for note in operation.notes if note.startswith(_AUTOMATIC))
        if operation.state == "queued":  # what it waits for
            blocks.extend(f"    {note}" for note in operation.notes)
    return "\n\nMOVES\n" + "\n".join(blocks)


def _executor_load(node: control_pb2.NodeStatus) -> str:
    """An executor's task milliseconds per batch, and per core when it has several ("-": no report yet)."""
    if not node.load_millis:
        return "-"
    cores = node.node.executor_cores
    per_core = f" ({node.load_per_core:.0f} ms/core)" if cores > 1 else ""
    return f"{node.load_millis:.0f} ms{per_core}"


def describe_load(load: control_pb2.LoadReport) -> str:
    """How a partition was last loaded, in a few words: `replica v12+1 35ms`; for one on Spark's own provider
    under the checkpoint file layer, the bytes read from each source (`replica files 12.0 MiB, checkpoint
    0.0 MiB v10+2`)."""
    applied = f"+{load.versions_applied}" if load.versions_applied else ""
    read = [(load.bytes_local_files, "local files"), (load.bytes_replica_files, "replica files"),
            (load.bytes_checkpoint, "checkpoint")]  # fmt: skip
    if any(size for size, _ in read):
        sources = ", ".join(f"{where} {_size(size)}" for size, where in read if size or where == "checkpoint")
        return f"{sources} v{load.from_version}{applied}"
    return f"{load.source} v{load.from_version}{applied} {load.millis}ms"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
