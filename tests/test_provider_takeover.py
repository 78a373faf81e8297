"""Two providers of one partition in one executor JVM, as Spark has them around a planned hand-over (it unloads a
partition's provider, may load the partition again before its maintenance closes the first one, and may unload
it under a task still using its store), with the provider's own Java code beside a real state node
(spark_provider/java_test/io/statestore/spark/TakeOverCheck.java, on the rig of tests/test_load_sources.py):

- a new provider takes over the previous one's idle store (load source `local`, same state, same directory)
  instead of restoring from the checkpoint location, and the previous one's close neither closes nor deletes it
  nor tells the node anything (no DEMOTE, no RELEASED: the node's log shows one demotion, the new provider's);
- a new provider whose previous one is still in use (the previous batch's task not committed yet) waits for it
  and takes the store over, rather than asking the node or the checkpoint location;
- a close from another thread while a task still writes does not close the store under the task: the task
  commits, and the provider closes after it, handing the committed store to the node as usual (DEMOTE, adopted
  as a replica). Whether close() itself waits for the commit (42fb205) or returns at once and closes when the
  task is done (864cee5, deferred) is reported, and either passes;
- a close from the task's own thread does not wait for itself;
- with sync replication, a commit waiting for a replica's ack that does not come (the replica's node paused) does
  not hold the provider: a close from another thread returns while the commit still waits.

The local channel hands the node its notices in the background, so TakeOverCheck stays up until the test has
seen the last one in the node's log."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest
from test_load_sources_harness import DRIVER, OPTIONS, Setup, load_rig
from test_node_harness import wait_until

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with load_rig(tmp_path_factory.mktemp("takeover")) as rig:
        classes = rig.classpath.split(":", 1)[0]
        subprocess.run(
            ["javac", "--release", "17", "-nowarn", "-cp", rig.classpath, "-d", classes,
             str(DRIVER / "TakeOverCheck.java")],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        yield rig


def node_events(setup: Setup, partition: int) -> list[dict]:
    """Node n's log events about the partition's store, in order."""
    location = str(setup.location(partition).path)
    events = []
    for line in setup.cluster.processes["n"].log().splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("store") == f"0/{partition}/default" and event.get("checkpoint") == location:
            events.append(event)
    return events


def adopted(setup: Setup, partition: int) -> list[int]:
    return [e["version"] for e in node_events(setup, partition) if e["event"] == "replica_adopted"]


def run_check(setup: Setup, mode: str, partition: int, until: Callable[[], bool], what: str) -> dict[str, str]:
    """TakeOverCheck's report of `mode` on `partition`; once it is done, wait until `until()` holds (`what`: the
    node's log shows the notice the check's last close sent), then let it exit."""
    local = setup.root.parent / "local-n"
    argv = ["java", "-Xmx256m", "-cp", setup.classpath, "io.statestore.spark.TakeOverCheck", mode,
            str(setup.root), str(partition), str(local), str(setup.sockets["n"])]  # fmt: skip
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report: dict[str, str] = {}
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == "done":
                break
            if "=" in line and not line.startswith(" "):
                name, _, value = line.strip().partition("=")
                report[name] = value
        else:
            process.wait(timeout=30)
            raise AssertionError(f"TakeOverCheck {mode} ended early: {process.stderr.read()[-4000:]}")
        wait_until(until, 30, what)
        _, stderr = process.communicate("exit\n", timeout=60)
        assert process.returncode == 0, stderr[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return report


def test_a_new_provider_takes_over_the_previous_ones_idle_store(setup: Setup) -> None:
    report = run_check(setup, "takeover", 1, lambda: 5 in adopted(setup, 1), "node n to adopt v5")
    assert report["first_keys"] == str(1 + 2 + 3 + 1), report
    # Provider 2 loads version 3 from provider 1's store: no checkpoint restore, no replica.
    assert (report["second_source"], report["second_from"], report["second_applied"]) == ("local", "3", "0"), report
    assert report["second_passed"] == "-", report
    assert report["same_state"] == "true" and report["took_directory"] == "true", report
    # Provider 1's close left the store to provider 2, which commits on it.
    assert report["directory_kept"] == "true", report
    assert report["second_commit"] == "4" and report["second_state_after"] == "true", report
    assert report["second_source_after"] == "local" and report["second_commit_again"] == "5", report
    # The node was told of provider 2's close only: one demotion (a DEMOTE or RELEASED of provider 1 would be
    # another, and would have handed the node provider 2's live directory), and the adoption at provider 2's last
    # version.
    events = [(e["event"], e.get("version"), e.get("why", "")) for e in node_events(setup, 1)]
    demotions = [e for e in events if e[0] == "demoted"]
    assert demotions == [("demoted", 5, "released by the local primary")], events
    assert adopted(setup, 1) == [5], events
    assert [e[0] for e in events].index("promoted") < [e[0] for e in events].index("demoted"), events
    # The checkpoint location has every commit of both providers.
    location = setup.location(1)
    assert location.increment_versions() == [1, 2, 3, 4, 5]
    with location.restore(setup.root.parent / "restored-1", version=5, options=OPTIONS) as restored:
        assert restored.version == 5 and restored.count() == 1 + 2 + 3 + 1 + 2


def test_a_new_provider_waits_for_the_previous_batchs_task_and_takes_its_store_over(setup: Setup) -> None:
    """The next batch's task loads the partition in a new provider while the previous batch's task still writes in
    the old one (Spark unloaded it meanwhile): the load waits for that commit and continues on the same store."""
    report = run_check(setup, "takeover-busy", 4, lambda: 5 in adopted(setup, 4), "node n to adopt v5")
    assert report["second_failed"] == "-", report
    assert report["first_commit"] == "4" and report["waited_for_commit"] == "true", report
    assert (report["second_source"], report["second_from"]) == ("local", "4"), report
    assert report["second_keys"] == "4" and report["second_commit"] == "5", report
    # Only the new provider's close told the node anything.
    demotions = [e["version"] for e in node_events(setup, 4) if e["event"] == "demoted"]
    assert demotions == [5], node_events(setup, 4)
    assert setup.location(4).increment_versions() == [1, 2, 3, 4, 5]


def test_a_close_while_a_task_uses_the_store_lets_the_task_commit_first(setup: Setup) -> None:
    """Spark closes the provider (its maintenance thread) while a task still writes: the task's store stays open,
    its commit succeeds, and the provider closes after it, handing the committed version to the node (DEMOTE). The
    close call itself may wait for the commit or return at once and close once the task is done: either keeps the
    store whole; closing it under the task would fail the commit."""
    report = run_check(setup, "close-under-task", 2, lambda: 2 in adopted(setup, 2), "node n to adopt v2")
    assert report["value_read_back"] == "2" and report["commit"] == "2", report
    assert report["close_returned"] == "true" and report["close_failed"] == "-", report
    assert report["close_mode"] in ("waited", "deferred"), report
    # The provider closed after the commit: the node was told once, at version 2.
    assert adopted(setup, 2) == [2]
    demotions = [e["version"] for e in node_events(setup, 2) if e["event"] == "demoted"]
    assert demotions == [2]
    assert setup.location(2).increment_versions() == [1, 2]


def test_a_close_from_the_tasks_own_thread_does_not_wait_for_itself(setup: Setup) -> None:
    """The task's own thread closes the provider with its store open, then the task fails (abort): nothing hangs,
    and the node stops being the partition's primary; what it adopts, if anything, is the committed version 1."""
    released = lambda: any(e["event"] == "demoted" for e in node_events(setup, 3))  # noqa: E731
    report = run_check(setup, "close-own-thread", 3, released, "node n to hear of the close")
    assert report == {"closed": "true", "aborted": "true"}, report
    assert [e["version"] for e in node_events(setup, 3) if e["event"] == "demoted"] == [1]
    assert adopted(setup, 3) in ([], [1])
    assert setup.location(3).increment_versions() == [1]


def let_exit(process: subprocess.Popen, replica: subprocess.Popen) -> None:
    """Resume the paused replica's node, let TakeOverCheck exit (killed if it does not)."""
    import signal

    replica.send_signal(signal.SIGCONT)
    if process.poll() is None:
        try:
            process.communicate("exit\n", timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_a_sync_commit_waiting_for_its_ack_does_not_hold_the_provider(setup: Setup) -> None:
    import signal

    local = setup.root.parent / "local-n"
    argv = ["java", "-Xmx256m", "-cp", setup.classpath, "io.statestore.spark.TakeOverCheck", "sync-close",
            str(setup.root), "4", str(local), str(setup.sockets["n"])]  # fmt: skip
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    replica = setup.cluster.processes["m"].popen
    report: dict[str, str] = {}
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == "warm=true", process.stderr.read()[-4000:] if process.stderr else ""
        replica.send_signal(signal.SIGSTOP)  # no ack comes now: node n answers after its sync timeout
        process.stdin.write("go\n")
        process.stdin.flush()
        for line in process.stdout:
            if line.strip() == "done":
                break
            name, _, value = line.strip().partition("=")
            report[name] = value
    finally:
        let_exit(process, replica)
    assert report == {"close_returned_while_commit_waited": "true", "committed_version": "2"}, report


@contextlib.contextmanager
def paused_while_checking(setup: Setup, mode: str, partition: int, paused: str, *jvm: str) -> Iterator[list[str]]:
    """TakeOverCheck `mode` on `partition` (and the next one): once it is warm, node `paused` is stopped with
    SIGSTOP and the check told to go on. Yields its output lines as they come; on exit the node is resumed and
    the check let exit."""
    import signal
    import threading

    local = setup.root.parent / "local-n"
    argv = ["java", "-Xmx512m", *jvm, "-cp", setup.classpath, "io.statestore.spark.TakeOverCheck", mode,
            str(setup.root), str(partition), str(local), str(setup.sockets["n"])]  # fmt: skip
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node = setup.cluster.processes[paused].popen
    lines: list[str] = []
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == "warm=true", process.stderr.read()[-4000:] if process.stderr else ""
        reader = threading.Thread(target=lambda: lines.extend(line.strip() for line in process.stdout), daemon=True)
        reader.start()
        node.send_signal(signal.SIGSTOP)
        process.stdin.write("go\n")
        process.stdin.flush()
        yield lines
    finally:
        let_exit(process, node)


def test_one_partitions_sync_wait_holds_up_no_other_partitions_commit(setup: Setup) -> None:
    """Partition 6's sync commit waits for an ack that does not come (the replica's node paused, node n answers
    after its 10 s sync timeout); partition 7's commit reaches node n meanwhile (the controller hears of its version
    2 from n) instead of queueing behind 6's wait on the JVM's one local channel."""
    import signal

    with paused_while_checking(setup, "sync-parallel", 6, "m") as lines:
        wait_until(lambda: "b_started=true" in lines, 30, "partition 7's commit to start")

        def heard_of_7() -> bool:
            versions = {p.store.store_id: p.primary_version for p in setup.cluster.status().partitions}
            return versions.get("0/7/default") == 2

        wait_until(heard_of_7, 8, "node n to report partition 7 at version 2")
        assert "a_returned=true" not in lines, lines  # partition 6 still waits for its ack
        setup.cluster.processes["m"].popen.send_signal(signal.SIGCONT)
        wait_until(lambda: "done" in lines, 60, "both commits to return")


def test_a_sync_commit_is_never_dropped_over_the_local_channels_backlog(setup: Setup) -> None:
    """Node n paused, partition 8's asynchronous commits fill the local channel's backlog past its bound (1 MiB
    here): the later ones are dropped (replicas pull them); partition 9's sync commit after them is queued anyway,
    and reaches node n once it resumes (before, it was dropped too, and silently became asynchronous: node n
    then held partition 9 at version 1 when its provider closed)."""
    import signal

    bound = "-Dstatestore.localChannel.maxQueuedBytes=1048576"
    with paused_while_checking(setup, "sync-over-backlog", 8, "n", bound) as lines:
        wait_until(lambda: "b_committing=true" in lines, 60, "partition 9's sync commit to start")
        setup.cluster.processes["n"].popen.send_signal(signal.SIGCONT)
        wait_until(lambda: "b_committed=2" in lines, 60, f"partition 9's commit to return ({lines})")
        released = lambda: [e for e in node_events(setup, 9) if e["event"] == "demoted"]  # noqa: E731
        # The close after the commit released partition 9 on node n: at version 2, had the commit reached it.
        assert wait_until(released, 30, "node n to hear of partition 9's close")[-1]["version"] == 2
