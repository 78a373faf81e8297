"""A provider's load never waits past its deadline for a replica busy with a catch-up or a bootstrap (which hold
the replica for up to minutes): the node answers that the replica is busy, and the provider reads the checkpoint
location. A real ReplicaSet and replica store; the catch-up is stood for by holding the replica's lock."""

from __future__ import annotations

import threading
from pathlib import Path

from test_node_harness import wait_until

from statestore.node.replica import ReplicaSet
from statestore.node.settings import NodeSettings
from statestore.rpc import common_pb2


def test_a_replica_busy_past_the_loads_deadline_is_passed_over_not_waited_for(tmp_path: Path) -> None:
    settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "node", node_id="n")
    replicas = ReplicaSet(tmp_path / "node" / "replicas", settings)
    store = common_pb2.StoreRef(store_id="0/4/default", checkpoint_dir=str(tmp_path / "ckpt"))
    replica = replicas.get_or_create(store)
    release = threading.Event()

    def catch_up() -> None:
        with replica.locked():
            release.wait(30)

    busy = threading.Thread(target=catch_up, daemon=True)
    busy.start()
    try:
        wait_until(lambda: not replica.locked().acquire(blocking=False) or replica.locked().release(), 5,
                   "the catch-up under way")  # fmt: skip
        answer = replica.checkpoint_into(tmp_path / "target", 3, wait_seconds=0.2)
        assert isinstance(answer, str) and "busy" in answer, answer
        assert not (tmp_path / "target").exists()
    finally:
        release.set()
        busy.join(10)
        replicas.close()
