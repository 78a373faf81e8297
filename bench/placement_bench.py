"""Placement benchmark: solve time, cost against greedy and round-robin baselines, and re-placement.

    python bench/placement_bench.py [--quick] --out out/placement.json

Writes the JSON report and a PNG next to it (same name, .png), and prints a table. Every cost is compared
in the same run, on the same instance, with the greedy and round-robin baselines and with a lower bound
no placement can beat (placement/bounds.py). Timings are wall-clock on a shared machine: the report
records the CPU count and load average at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement.assignment import NoAssignment
from placement.baselines import greedy_assignment, round_robin_assignment
from placement.bounds import lower_bound
from placement.build import InfeasiblePlacement, build_problem
from placement.changes import NodeFailed, NodeJoined
from placement.costs import CostModel
from placement.demand import PartitionDemand
from placement.exhaustive import exhaustive_optimum
from placement.groups import Role
from placement.plan import plan_replica_groups, replan
from placement.problem import Problem
from placement.solver import SolverSettings, solve_problem
from placement.synthetic import capacity_for, random_demands, tree_topology
from placement.topology import Node, Topology

HEADLINE = ((1024, 64, 2), (4096, 128, 2))
TARGET_S = {"l=1024,z=64,q=2": 1.0, "l=4096,z=128,q=2": 5.0}


class Progress:
    """One line per step on stderr, with the elapsed time."""

    def __init__(self, steps: int) -> None:
        self.steps, self.done, self.start = steps, 0, time.perf_counter()

    def __call__(self, what: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        print(f"[{self.done}/{self.steps} {elapsed:5.1f}s] {what}", file=sys.stderr, flush=True)


def tree_instance(partitions: int, z: int, q: int, seed: int) -> tuple[Topology, list[PartitionDemand]]:
    """z nodes in racks of 8, pods of 4 racks; 25% spare capacity; loads up to 0.5."""
    rng = np.random.default_rng(seed)
    racks = max(z // 8, 1)
    pods = max(racks // 4, 1)
    capacity = capacity_for(partitions, q, z)
    topology = tree_topology(pods, racks // pods, z // racks, capacity, rng, max_load=0.5)
    return topology, random_demands(partitions, rng)


def family_instances(seed: int, large: bool) -> list[tuple[str, Topology, list[PartitionDemand], int]]:
    """Topologies unlike the headline tree: uneven racks and capacities, one rack, two racks, tight room."""
    rng = np.random.default_rng(seed)
    uneven, n = [], 0
    for r in range(6):
        for _ in range(int(rng.integers(2, 10))):
            uneven.append(Node(f"n{n}", f"r{r}", ("core", f"pod{r % 3}", f"r{r}"),
                               capacity=int(rng.integers(10, 60)), load=float(rng.uniform(0, 0.9))))
            n += 1
    flat = [Node(f"n{i}", "r0", capacity=60, load=float(rng.uniform(0, 0.6))) for i in range(16)]
    two = [Node(f"n{i}", f"r{i % 2}", capacity=60, load=float(rng.uniform(0, 0.6))) for i in range(16)]
    big = []
    if large:  # no rack information at all, at the size of the largest headline instance
        flat_big = [Node(f"n{i}", "r0", capacity=capacity_for(4096, 2, 128), load=float(rng.uniform(0, 0.5)))
                    for i in range(128)]
        big = [("one rack, l=4096", Topology(tuple(flat_big)), random_demands(4096, rng), 2)]
    room = sum(node.capacity for node in uneven)
    return [
        *big,
        ("uneven racks", Topology(tuple(uneven)), random_demands(min(300, int(room / 3 / 1.2)), rng), 2),
        ("one rack", Topology(tuple(flat)), random_demands(300, rng), 2),
        ("two racks", Topology(tuple(two)), random_demands(300, rng), 2),
        ("tight tree", tree_topology(2, 4, 4, capacity_for(400, 2, 32, 1.05), rng, 0.5), random_demands(400, rng), 2),
        ("q=1 tree", tree_topology(2, 3, 4, capacity_for(500, 1, 24), rng, 0.5), random_demands(500, rng), 1),
        ("q=3 tree", tree_topology(2, 4, 4, capacity_for(300, 3, 32), rng, 0.5), random_demands(300, rng), 3),
    ]


def timed(run: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time of `repeats` runs, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def compare(name: str, problem: Problem, repeats: int) -> dict[str, object]:
    """Solve `problem`, and price both baselines and the lower bound on it."""
    solve_s, (X, how) = timed(lambda: solve_problem(problem, SolverSettings()), repeats)
    assert not problem.violations(X), problem.violations(X)
    ours = problem.evaluate(X).total
    alone, _ = solve_problem(problem, SolverSettings(greedy_start=False))
    hungarian = problem.evaluate(alone).total
    greedy_s, greedy = timed(lambda: baseline_cost(problem, greedy_assignment), 1)
    round_robin_s, round_robin = timed(lambda: baseline_cost(problem, round_robin_assignment), 1)
    bound = lower_bound(problem)
    return {
        "name": name, "partitions": problem.partitions, "nodes": problem.nodes, "replicas": problem.replicas,
        "copies_per_rack": problem.rack_limit, "blocks": how.blocks, "start": how.start,
        "solve_s": solve_s, "greedy_s": greedy_s, "round_robin_s": round_robin_s,
        "cost": ours, "greedy_cost": finite(greedy), "round_robin_cost": finite(round_robin), "lower_bound": bound,
        "ratio_vs_greedy": finite(ours / greedy), "ratio_vs_round_robin": finite(ours / round_robin),
        "hungarian_start_only_cost": hungarian, "hungarian_start_only_ratio_vs_greedy": finite(hungarian / greedy),
        "gap_to_lower_bound": ours / bound - 1, "greedy_gap_to_lower_bound": finite(greedy / bound - 1),
        "round_robin_gap_to_lower_bound": finite(round_robin / bound - 1),
    }


def finite(value: float) -> float | None:
    """`value`, or None where a baseline found no placement (ratios against it are 0, costs inf)."""
    return value if np.isfinite(value) and value != 0 else None


def baseline_cost(problem: Problem, baseline: Callable[[Problem], np.ndarray]) -> float:
    """The baseline's cost, or inf when it finds no valid placement (round robin can run out of room)."""
    try:
        return problem.evaluate(baseline(problem)).total
    except NoAssignment:
        return float("inf")


def failure(topology: Topology, demands: list[PartitionDemand], q: int) -> dict[str, object]:
    """Fail the node holding most roles; count what moves."""
    current = plan_replica_groups(topology, demands, q).placement
    counts = current.role_counts()
    victim = max(sorted(counts), key=counts.get)
    start = time.perf_counter()
    _, plan = replan(topology, demands, current, NodeFailed(victim))
    replan_s = time.perf_counter() - start
    handovers = [m for m in plan.moves if m.role is Role.PRIMARY and m.target in current[m.partition].nodes]
    return {
        "failed_node": victim, "roles_on_failed_node": counts[victim], "moves": len(plan.moves),
        "moves_from_failed_node": sum(m.source == victim for m in plan.moves),
        "handovers_among_holders": len(handovers),
        "bytes_moved": sum(m.bytes for m in plan.moves), "replan_s": replan_s,
        "batches": len(plan.handover.batches), "batches_lower_bound": plan.handover.lower_bound,
        "batch_sizes": [len(batch) for batch in plan.handover.batches],
        "cost_after": plan.cost.total, "lower_bound_after": plan.lower_bound,
    }


def join(topology: Topology, demands: list[PartitionDemand], q: int) -> dict[str, object]:
    """Add an empty node to the first rack; only moves that pay for themselves should happen."""
    current = plan_replica_groups(topology, demands, q).placement
    first = topology.nodes[0]
    newcomer = Node("joined", first.rack, first.switches, capacity=first.capacity, load=0.0)
    start = time.perf_counter()
    after, plan = replan(topology, demands, current, NodeJoined(newcomer))
    replan_s = time.perf_counter() - start
    stay = build_problem(after, demands, q, CostModel(), current)
    return {
        "moves": len(plan.moves), "moves_to_new_node": sum(m.target == "joined" for m in plan.moves),
        "cost_if_nothing_moves": stay.evaluate(stay.start).total, "cost_after": plan.cost.total,
        "migration": plan.cost.migration, "replan_s": replan_s,
    }


def exhaustive(count: int, seed: int) -> dict[str, object]:
    """The solver against exhaustive search on small random instances (fresh and after a change)."""
    rng = np.random.default_rng(seed)
    gaps = []
    while len(gaps) < count:
        z = int(rng.integers(3, 6))
        nodes = [Node(f"n{i}", f"r{r}", ("core", f"pod{r % 2}", f"r{r}"), capacity=int(rng.integers(1, 4)),
                      load=float(rng.choice([0.0, 0.3, 0.7])))
                 for i, r in enumerate(rng.integers(0, 3, z))]
        demands = [PartitionDemand(f"p{i}", int(rng.integers(1, 100)) * 1000, int(rng.integers(1, 100)) * 10)
                   for i in range(int(rng.integers(2, 4)))]
        q = int(rng.integers(0, 3))
        topology = Topology(tuple(nodes))
        try:
            current = plan_replica_groups(topology, demands, q).placement if rng.random() < 0.5 else None
            if current is not None:
                topology = topology.updated(nodes[0].id, load=float(rng.uniform(0, 1)))
            problem = build_problem(topology, demands, q, CostModel(float(rng.choice([1, 10, 100]))), current)
        except InfeasiblePlacement:
            continue
        X, _ = solve_problem(problem, SolverSettings())
        optimum, _ = exhaustive_optimum(problem)
        gaps.append(problem.evaluate(X).total / optimum - 1)
    return {"instances": len(gaps), "exact": int(sum(g <= 1e-9 for g in gaps)),
            "max_gap": float(max(gaps)), "mean_gap": float(np.mean(gaps))}


def blocks_against_whole(partitions: int, z: int, q: int, seed: int) -> dict[str, object]:
    """The price of solving in blocks: the same fresh instance solved whole and split."""
    topology, demands = tree_instance(partitions, z, q, seed)
    problem = build_problem(topology, demands, q, CostModel())
    as_one = SolverSettings(block_partitions=partitions, greedy_start=False)
    whole_s, (W, _) = timed(lambda: solve_problem(problem, as_one), 1)
    split_s, (S, how) = timed(lambda: solve_problem(problem, SolverSettings(greedy_start=False)), 1)
    whole, split = problem.evaluate(W).total, problem.evaluate(S).total
    return {"partitions": partitions, "nodes": z, "replicas": q, "blocks": how.blocks, "whole_cost": whole,
            "split_cost": split, "split_over_whole": split / whole - 1, "whole_s": whole_s, "split_s": split_s,
            "lower_bound": lower_bound(problem)}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    instances = report["instances"]
    names = [i["name"] for i in instances]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    x = np.arange(len(names))
    for offset, key, label in ((-0.27, "gap_to_lower_bound", "Hungarian (ours)"),
                               (0.0, "greedy_gap_to_lower_bound", "greedy"),
                               (0.27, "round_robin_gap_to_lower_bound", "round robin")):
        axes[0].bar(x + offset, [1e2 if i[key] is None else max(i[key], 1e-9) for i in instances], 0.27,
                    label=label)
    axes[0].set_yscale("log")
    axes[0].set_ylim(1e-10, 1e2)
    axes[0].set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    axes[0].set_ylabel("cost / lower bound - 1 (floor 1e-9; top: no placement)")
    axes[0].set_title("Cost above the lower bound")
    axes[0].legend(fontsize=8, loc="upper center", ncol=3)
    head = [i for i in instances if i["name"] in TARGET_S]
    hx = np.arange(len(head))
    axes[1].bar(hx - 0.2, [i["solve_s"] for i in head], 0.4, label="Hungarian (ours)")
    axes[1].bar(hx + 0.2, [i["greedy_s"] for i in head], 0.4, label="greedy")
    axes[1].scatter(hx - 0.2, [TARGET_S[i["name"]] for i in head], marker="_", s=900, color="red", label="target")
    axes[1].set_xticks(hx, [i["name"] for i in head], fontsize=8)
    axes[1].set_ylabel("seconds (wall)")
    axes[1].set_title("Solve time")
    axes[1].legend(fontsize=8)
    fail = report["failure"]
    axes[2].bar(np.arange(1, len(fail["batch_sizes"]) + 1), fail["batch_sizes"])
    axes[2].set_xlabel("batch")
    axes[2].set_ylabel("moves in batch")
    axes[2].set_title(f"Hand-over after failing {fail['failed_node']}: {fail['moves']} moves, "
                      f"{fail['batches']} batches (>= {fail['batches_lower_bound']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(report: dict) -> None:
    print(f"{'instance':<20}{'l':>6}{'z':>5}{'q':>3}{'blocks':>7}{'start':>10}{'solve s':>9}{'greedy s':>9}"
          f"{'vs greedy':>11}{'vs r-robin':>11}{'gap to LB':>11}")
    def shown(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    for i in report["instances"]:
        print(f"{i['name']:<20}{i['partitions']:>6}{i['nodes']:>5}{i['replicas']:>3}{i['blocks']:>7}{i['start']:>10}"
              f"{i['solve_s']:>9.3f}{i['greedy_s']:>9.3f}{shown(i['ratio_vs_greedy'], '.6f'):>11}"
              f"{shown(i['ratio_vs_round_robin'], '.4f'):>11}{i['gap_to_lower_bound']:>11.2e}")
    f, j, e, b = report["failure"], report["join"], report["exhaustive"], report["block_decomposition"]
    print(f"failure of {f['failed_node']} ({f['roles_on_failed_node']} roles): {f['moves']} moves "
          f"({f['handovers_among_holders']} hand-overs among holders), {f['bytes_moved'] / 1e9:.1f} GB, "
          f"replan {f['replan_s']:.2f} s, {f['batches']} batches (lower bound {f['batches_lower_bound']})")
    print(f"empty node joins: {j['moves']} moves ({j['moves_to_new_node']} to it), cost "
          f"{j['cost_if_nothing_moves']:.4g} -> {j['cost_after']:.4g}, replan {j['replan_s']:.2f} s")
    print(f"exhaustive search: {e['exact']}/{e['instances']} optimal, max gap {e['max_gap']:.2e}")
    print(f"blocks vs whole (l={b['partitions']}): {b['blocks']} blocks cost {b['split_over_whole']:+.2e} "
          f"relative, {b['split_s']:.2f} s vs {b['whole_s']:.2f} s")
    print(f"cost_ratio_vs_greedy {report['cost_ratio_vs_greedy']:.6f} (Hungarian start alone: "
          f"{report['hungarian_start_only_ratio_vs_greedy']:.6f}), "
          f"cost_ratio_vs_round_robin {report['cost_ratio_vs_round_robin']:.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run, well under a minute")
    parser.add_argument("--out", type=Path, required=True, help="JSON report; the PNG goes next to it")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else 3
    extra = () if args.quick else ((256, 32, 2), (2048, 96, 2))
    families = family_instances(args.seed, large=not args.quick)
    progress = Progress(len(HEADLINE) + len(extra) + len(families) + 4)
    report: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()}, "quick": args.quick,
    }
    instances = []
    for partitions, z, q in (*HEADLINE, *extra):
        topology, demands = tree_instance(partitions, z, q, args.seed)
        name = f"l={partitions},z={z},q={q}"
        progress(f"solving {name} ({repeats} runs) and both baselines")
        instances.append(compare(name, build_problem(topology, demands, q, CostModel()), repeats))
    for name, topology, demands, q in families:
        progress(f"solving family '{name}'")
        instances.append(compare(name, build_problem(topology, demands, q, CostModel()), 1))
    partitions, z, q = HEADLINE[-1]
    topology, demands = tree_instance(partitions, z, q, args.seed)
    progress(f"failing the busiest node of l={partitions},z={z},q={q}")
    report["failure"] = {"instance": f"l={partitions},z={z},q={q}", **failure(topology, demands, q)}
    partitions, z, q = HEADLINE[0]
    topology, demands = tree_instance(partitions, z, q, args.seed)
    progress(f"adding an empty node to l={partitions},z={z},q={q}")
    report["join"] = {"instance": f"l={partitions},z={z},q={q}", **join(topology, demands, q)}
    count = 20 if args.quick else 100
    progress(f"exhaustive search on {count} small instances")
    report["exhaustive"] = exhaustive(count, args.seed)
    progress("blocks against solving whole")
    report["block_decomposition"] = blocks_against_whole(*((256, 32, 2) if args.quick else (512, 32, 2)), args.seed)
    report["instances"] = instances
    report["solve_s"] = {i["name"]: i["solve_s"] for i in instances if i["name"] in TARGET_S}
    report["cost_ratio_vs_greedy"] = max(i["ratio_vs_greedy"] for i in instances if i["ratio_vs_greedy"])
    report["cost_ratio_vs_round_robin"] = max(
        i["ratio_vs_round_robin"] for i in instances if i["ratio_vs_round_robin"]
    )
    report["hungarian_start_only_ratio_vs_greedy"] = max(
        i["hungarian_start_only_ratio_vs_greedy"] for i in instances if i["hungarian_start_only_ratio_vs_greedy"]
    )
    report["moved_on_node_failure"] = report["failure"]["moves"]
    report["roles_on_failed_node"] = report["failure"]["roles_on_failed_node"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    png = args.out.with_suffix(".png")
    plot(report, png)
    print_table(report)
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
