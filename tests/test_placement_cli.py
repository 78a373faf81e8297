"""`statestore placement plan|replan` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from placement.groups import Placement
from placement.synthetic import tree_topology
from statestore.cli import main


@pytest.fixture
def topology_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    topology = tree_topology(2, 2, 3, 40, np.random.default_rng(0), max_load=0.5)
    path.write_text(json.dumps(topology.to_json()))
    return path


def test_plan_prints_nodes_and_cost_and_writes_the_plan(topology_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "plan.json"
    code = main(["placement", "plan", "--topology", str(topology_file), "--partitions", "30",
                 "--replicas", "2", "--out", str(out), "--groups"])
    assert code == 0
    text = capsys.readouterr().out
    assert "placement: 30 partitions x 3 copies on 12 nodes" in text
    assert "distinct racks" in text
    for word in ("traffic", "load", "migration", "total", "lower bound", "primaries"):
        assert word in text
    saved = json.loads(out.read_text())
    placement = Placement.from_json(saved["placement"])
    assert len(placement) == 30 and placement.replicas == 2
    assert saved["cost"]["total"] >= saved["lower_bound"]


def test_replan_after_a_failure_lists_the_moves_and_batches(topology_file: Path, tmp_path: Path, capsys) -> None:
    plan_file = tmp_path / "plan.json"
    assert main(["placement", "plan", "--topology", str(topology_file), "--partitions", "30",
                 "--out", str(plan_file)]) == 0
    placement = Placement.from_json(json.loads(plan_file.read_text())["placement"])
    capsys.readouterr()
    assert main(["placement", "replan", "--topology", str(topology_file), "--partitions", "30",
                 "--placement", str(plan_file), "--fail", "n3", "--out", str(tmp_path / "after.json")]) == 0
    text = capsys.readouterr().out
    assert "change: NodeFailed(node_id='n3')" in text
    assert "hand-over plan (batched)" in text
    moves = json.loads((tmp_path / "after.json").read_text())["moves"]
    assert {m["partition"] for m in moves if m["source"] == "n3"} == {p for p, _ in placement.roles_on("n3")}
    assert f"moves: {len(moves)}," in text


@pytest.mark.parametrize("change", [["--add", "n99@r1"], ["--add", '{"id": "n99", "rack": "r9", "capacity": 9}'],
                                    ["--leave", "n0"], ["--load", "n0=0.9"]])
def test_replan_accepts_every_kind_of_change(topology_file: Path, tmp_path: Path, change: list[str]) -> None:
    plan_file = tmp_path / "plan.json"
    assert main(["placement", "plan", "--topology", str(topology_file), "--partitions", "12",
                 "--out", str(plan_file)]) == 0
    assert main(["placement", "replan", "--topology", str(topology_file), "--partitions", "12",
                 "--placement", str(plan_file), "--strategy", "fluid", *change]) == 0


def test_infeasible_requests_are_refused_with_a_message(topology_file: Path, tmp_path: Path, capsys) -> None:
    code = main(["placement", "plan", "--topology", str(topology_file), "--partitions", "30", "--replicas", "12"])
    assert code == 2
    assert "need 13 copies (a primary and 12 replicas) each" in capsys.readouterr().err
    plan_file = tmp_path / "plan.json"
    assert main(["placement", "plan", "--topology", str(topology_file), "--partitions", "30",
                 "--out", str(plan_file)]) == 0
    code = main(["placement", "replan", "--topology", str(topology_file), "--partitions", "30",
                 "--placement", str(plan_file), "--add", "n99@r77"])
    assert code == 2
    assert "rack 'r77' is new, so give the capacity" in capsys.readouterr().err


def test_partitions_from_a_file(topology_file: Path, tmp_path: Path, capsys) -> None:
    parts = tmp_path / "parts.json"
    parts.write_text(json.dumps({"partitions": [
        {"id": "agg/0", "size_bytes": 10**9, "increment_bytes": 10**7},
        {"id": "agg/1", "size_bytes": 10**6, "increment_bytes": 10**3},
    ]}))
    assert main(["placement", "plan", "--topology", str(topology_file), "--partitions", str(parts), "--groups"]) == 0
    assert "agg/0" in capsys.readouterr().out
