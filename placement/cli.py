"""`statestore placement plan|replan`: place replica groups on a topology file and show cost and moves.

    statestore placement plan --topology cluster.json --partitions 200 --replicas 2 --out placement.json
    statestore placement replan --topology cluster.json --placement placement.json --fail n3

`--partitions` is a partitions JSON file (see docs/placement.md) or a count of equal partitions sized by
`--size-bytes` and `--increment-bytes`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from placement.build import InfeasiblePlacement
from placement.changes import Change, LoadShifted, NodeFailed, NodeJoined, NodeLeft
from placement.costs import CostBreakdown, CostModel
from placement.demand import PartitionDemand, load_demands, uniform_demands
from placement.groups import Placement
from placement.handover import Strategy
from placement.plan import PlacementPlan, plan_replica_groups, replan
from placement.topology import Node, Topology


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore placement` with its `plan` and `replan` subcommands."""
    parser = subparsers.add_parser("placement", help="place replica groups and plan their moves")
    commands = parser.add_subparsers(dest="placement_command", required=True, metavar="SUBCOMMAND")

    plan = commands.add_parser("plan", help="choose replica groups for a topology")
    _common(plan)
    plan.add_argument("--replicas", type=int, default=2, help="replicas per partition (default 2)")
    plan.add_argument("--groups", action="store_true", help="also list every partition's group")
    plan.set_defaults(handler=_plan)

    again = commands.add_parser("replan", help="refresh a placement after a change and plan the moves")
    _common(again)
    again.add_argument("--placement", required=True, type=Path, help="current placement (or plan) JSON")
    change = again.add_mutually_exclusive_group(required=True)
    change.add_argument("--fail", metavar="NODE", help="the node failed")
    change.add_argument("--leave", metavar="NODE", help="the node is leaving (drains)")
    change.add_argument("--add", metavar="NODE", help='a node joins: JSON object or ID@RACK[:CAPACITY]')
    change.add_argument("--load", metavar="NODE=LOAD", help="the node's load changed")
    again.add_argument("--strategy", choices=[s.value for s in Strategy], default=Strategy.BATCHED.value)
    again.set_defaults(handler=_replan)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", required=True, type=Path, help="topology JSON (docs/placement.md)")
    parser.add_argument("--partitions", default="200", help="partitions JSON file, or a count (default 200)")
    parser.add_argument("--size-bytes", type=float, default=256e6, help="state size of counted partitions")
    parser.add_argument("--increment-bytes", type=float, default=2e6, help="increment per batch of counted partitions")
    parser.add_argument("--horizon", type=float, default=CostModel.horizon_batches, help="batches a placement lasts")
    parser.add_argument("--load-weight", type=float, default=CostModel.load_weight,
                        help="cost of a role on a full node, in mean increments per batch")
    parser.add_argument("--migration-weight", type=float, default=CostModel.migration_weight,
                        help="cost of a byte moved, in byte-hops")
    parser.add_argument("--out", type=Path, help="write the plan (placement, cost, moves) as JSON")


def _plan(args: argparse.Namespace) -> int:
    topology, demands, model = _inputs(args)
    try:
        plan = plan_replica_groups(topology, demands, args.replicas, cost_model=model)
    except InfeasiblePlacement as refused:
        print(f"statestore placement: {refused}", file=sys.stderr)
        return 2
    _print_nodes(topology, plan)
    if args.groups:
        _print_groups(plan.placement)
    _print_cost(plan, model)
    _write(args.out, plan)
    return 0


def _replan(args: argparse.Namespace) -> int:
    topology, demands, model = _inputs(args)
    saved = json.loads(args.placement.read_text())
    current = Placement.from_json(saved.get("placement", saved))  # a placement, or a plan written by --out
    try:
        change = _change(args, topology)
        after, plan = replan(topology, demands, current, change, cost_model=model, strategy=args.strategy)
    except (InfeasiblePlacement, KeyError, ValueError) as refused:
        print(f"statestore placement: {refused}", file=sys.stderr)
        return 2
    print(f"change: {change}")
    _print_nodes(after, plan)
    _print_cost(plan, model)
    _print_moves(plan)
    _write(args.out, plan)
    return 0


def _inputs(args: argparse.Namespace) -> tuple[Topology, list[PartitionDemand], CostModel]:
    topology = Topology.load(args.topology)
    if args.partitions.isdigit():
        demands = uniform_demands(int(args.partitions), int(args.size_bytes), int(args.increment_bytes))
    else:
        demands = load_demands(args.partitions)
    model = CostModel(args.horizon, args.load_weight, args.migration_weight)
    return topology, demands, model


def _change(args: argparse.Namespace, topology: Topology) -> Change:
    if args.fail:
        return NodeFailed(args.fail)
    if args.leave:
        return NodeLeft(args.leave)
    if args.load:
        node, _, load = args.load.partition("=")
        return LoadShifted(node, float(load))
    return NodeJoined(parse_node(args.add, topology))


def parse_node(text: str, topology: Topology) -> Node:
    """A node from a JSON object, or from `ID@RACK[:CAPACITY]` (switches and capacity as in that rack)."""
    if text.lstrip().startswith("{"):
        return Node.from_json(json.loads(text))
    node_id, _, rest = text.partition("@")
    rack, _, capacity = rest.partition(":")
    if not rack:
        raise ValueError(f"--add wants a JSON object or ID@RACK[:CAPACITY], got {text!r}")
    peer = next((n for n in topology.nodes if n.rack == rack), None)
    if not capacity and peer is None:
        raise ValueError(f"--add {text!r}: rack {rack!r} is new, so give the capacity: ID@RACK:CAPACITY")
    return Node(
        node_id,
        rack,
        peer.switches if peer else (),
        capacity=int(capacity) if capacity else peer.capacity,
        capacity_bytes=None if capacity or peer is None else peer.capacity_bytes,
    )


def _print_nodes(topology: Topology, plan: PlacementPlan) -> None:
    placement = plan.placement
    primaries: dict[str, int] = {}
    replicas: dict[str, int] = {}
    for group in placement.values():
        primaries[group.primary] = primaries.get(group.primary, 0) + 1
        for r in group.replicas:
            replicas[r] = replicas.get(r, 0) + 1
    limit = "distinct racks" if plan.copies_per_rack == 1 else f"at most {plan.copies_per_rack} per rack"
    print(
        f"placement: {len(placement)} partitions x {placement.replicas + 1} copies on {len(topology)} nodes "
        f"(copies of a partition on distinct nodes, {limit})"
    )
    rows = [("node", "rack", "capacity", "load", "primaries", "replicas", "used")]
    for node in topology.nodes:
        roles = primaries.get(node.id, 0) + replicas.get(node.id, 0)
        used = f"{roles / node.capacity:.0%}" if node.capacity else "-"
        state = " (draining)" if node.draining else ""
        capacity = str(node.capacity) if node.capacity is not None else f"{node.capacity_bytes} B"
        rows.append(
            (node.id + state, node.rack, capacity, f"{node.load:.2f}",
             str(primaries.get(node.id, 0)), str(replicas.get(node.id, 0)), used)
        )
    _table(rows)


def _print_groups(placement: Placement) -> None:
    rows = [("partition", "primary", "replicas")]
    rows += [(p, g.primary, ",".join(g.replicas)) for p, g in placement.items()]
    _table(rows)


def _print_cost(plan: PlacementPlan, model: CostModel) -> None:
    cost: CostBreakdown = plan.cost
    print(f"cost, in bytes x switch hops over {model.horizon_batches:g} batches:")
    for name in ("traffic", "load", "migration"):
        print(f"  {name:<10} {getattr(cost, name):>14.4g}")
    gap = cost.total / plan.lower_bound - 1 if plan.lower_bound > 0 else 0.0
    print(f"  {'total':<10} {cost.total:>14.4g}   (lower bound {plan.lower_bound:.4g}: within {gap:.3%})")


def _print_moves(plan: PlacementPlan) -> None:
    moves = plan.moves
    total = sum(move.bytes for move in moves)
    print(f"moves: {len(moves)}, {total / 1e6:.1f} MB to ship")
    rows = [("partition", "role", "from", "to", "bytes", "sender")]
    rows += [
        (m.partition, str(m.role), m.source or "-", m.target or "-", str(m.bytes), m.sender or "-")
        for m in moves
    ]
    if moves:
        _table(rows)
    handover = plan.handover
    print(
        f"hand-over plan ({handover.strategy}): {len(handover.batches)} batches "
        f"(no plan needs fewer than {handover.lower_bound})"
    )
    for i, batch in enumerate(handover.batches, 1):
        shipped = sum(move.bytes for move in batch) / 1e6
        print(f"  batch {i}: {len(batch)} moves, {shipped:.1f} MB: " + ", ".join(_short(m) for m in batch))


def _short(move) -> str:
    return f"{move.partition}/{move.role}:{move.source or '-'}->{move.target or '-'}"


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _write(path: Path | None, plan: PlacementPlan) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_json(), indent=1) + "\n")
    print(f"wrote {path}")
