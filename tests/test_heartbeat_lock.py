"""A node's heartbeat never holds up its providers' local channel (issue 30): what a LOAD or PROMOTE tells the
heartbeater (the executor, its cores) is taken while a heartbeat waits on an unresponsive controller."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from test_node_harness import wait_until

from statestore.node.membership import Heartbeater
from statestore.node.settings import NodeSettings


def test_the_executors_description_is_taken_while_a_heartbeat_waits_on_the_controller(tmp_path: Path) -> None:
    with socket.socket() as black_hole:  # accepts connections (the kernel does) and never answers
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(8)
        controller = f"127.0.0.1:{black_hole.getsockname()[1]}"
        settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path, node_id="n", controller=controller)
        heartbeater = Heartbeater(settings, primaries=list, replicas_held=list, on_groups=lambda _groups: None)
        beat = threading.Thread(target=heartbeater.beat, daemon=True)
        beat.start()
        wait_until(lambda: heartbeater._beat_lock.locked(), 5, "the heartbeat under way")
        heartbeater.set_executor_cores(4)
        heartbeater.set_executor("7", "host-7")
        assert beat.is_alive(), "the heartbeat ended before the local channel's updates were taken"
        beat.join(10)
        assert heartbeater._node_now().executor_cores == 4 and heartbeater._node_now().executor_id == "7"
