"""The driver of `test_multi_host.py`, run inside its own network namespace (`ip netns exec`): a stateful
aggregation with q=1 on a standalone cluster whose workers are other namespaces, replication between their
addresses, an executor killed with SIGKILL between batches, and every batch's output compared with Spark's
RocksDB provider on the same input (the same cluster, after ours). Writes what it saw as JSON; an assertion
that fails exits non-zero with its traceback in the log.

Usage: python tests/netns_driver.py ROOT MASTER_URL DRIVER_ADDRESS OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from test_failover_spark import EVENTS, kill_busiest_executor, warm
from test_failover_spark_harness import (
    RecordedQuery,
    aggregation,
    assert_same_batches,
    keyed_rows,
    reference_outputs,
    wait_for,
)
from test_replica_groups_spark_harness import EXECUTORS, controller_address, start_spark, status

from spark_provider.progress import load_sources

NODE_PORT = 7100
CONTROLLER_PORT = 7200


def main(root: Path, master: str, driver_address: str, out: Path) -> None:
    spark = start_spark(
        root,
        "multi-host",
        master=master,
        spark_conf={
            "spark.driver.host": driver_address,
            "spark.driver.bindAddress": driver_address,
            "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
            "spark.cores.max": str(EXECUTORS),
        },
        replication_factor=1,
        # Fixed ports, as behind a firewall between hosts (docs/deploy.md).
        node_port=NODE_PORT,
        controller_port=CONTROLLER_PORT,
    )
    report: dict = {}
    try:
        status_of_executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
        wait_for(lambda: status_of_executors().size() == EXECUTORS + 1, 120, f"{EXECUTORS} executors registered")
        query = RecordedQuery(spark, root / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            address = controller_address(spark)
            report["controller"] = address
            warm(spark, [query], 1)
            reply = status(address)
            report["nodes"] = {n.node.node_id: n.node.address for n in reply.nodes if n.alive}
            report["executor_hosts"] = {n.node.node_id: n.node.executor_host for n in reply.nodes if n.alive}
            report["groups"] = {
                p.store.store_id: {
                    "primary": p.primary_node,
                    "replicas": {r.node_id: r.version_held for r in p.replicas},
                    "primary_version": p.primary_version,
                }
                for p in reply.partitions
            }
            victim, lost = kill_busiest_executor(address, [query])
            report["victim"], report["lost"] = victim, lost[id(query)]
            before = query.last_batch_id()
            query.feed(1)
            query.wait_processed(180)
            report["load_sources_after_kill"] = load_sources(query.progress_of(before + 1))
            query.feed(2)
            query.wait_processed(180)
        finally:
            query.stop()
        ours = query.results()
        theirs = reference_outputs(query, root / "reference")
        assert_same_batches(ours, theirs)
        report["batches_compared"] = len(ours)
        report["results_match"] = True
    finally:
        out.write_text(json.dumps(report, indent=2, default=str))
        spark.stop()
        # The driver's last line: the test checks that the process exits soon after it.
        out.with_suffix(".stopped").write_text(str(time.time()))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]))
