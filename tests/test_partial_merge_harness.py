"""A rig for partial-state merge (DESIGN.md section 4) through the provider's own Java code
(spark_provider/java_test/io/statestore/spark/PartialMergeCheck.java) beside a real state node, without Spark's
scheduler: a partition's history written by the provider, copied to one state root per run, the node handed a
replica at the last version but one (as a provider's unloaded directory, DEMOTE), then a batch on the last
version with that increment held back by the `last-increment` fault point, partial merge on or off. Used by
tests/test_partial_merge.py and bench/partial_merge_bench.py. Holds no tests of its own."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from test_load_sources_harness import DRIVER, OPTIONS, Setup, load_rig

from statestore.checkpoint_location import CheckpointLocation
from statestore.node.local_channel import STATUS_ACCEPTED, Demote, decode_reply, encode_demote, read_frame

PARTITION = 0


@dataclass
class Run:
    """One batch: `script` (PartialMergeCheck's script lines) on the last version of a copy of a history."""

    label: str
    root: Path
    version: int
    partial_merge: bool
    script: list[str]
    delay_ms: int = 0  # the increment's read held back this long (fault point last-increment)
    apply_delay_ms: int = 0  # then its apply (last-increment-apply: a partial merge only)
    dump: bool = True  # write the store's RocksDB contents after the commit

    def increment(self, version: int) -> bytes:
        """The bytes of increment `version` in this run's checkpoint location."""
        return (self.root / "0" / str(PARTITION) / f"{version}.increment").read_bytes()


@dataclass
class Outcome:
    """What PartialMergeCheck printed for one run: its events (`load`, `op`, `commit`, `pending`, ...) and the
    dump of its store's RocksDB after the commit."""

    run: Run
    events: list[dict[str, str]] = field(default_factory=list)
    dump: str = ""

    def event(self, name: str) -> dict[str, str]:
        found = [e for e in self.events if e["ev"] == name]
        assert len(found) == 1, (name, self.events)
        return found[0]

    def has(self, name: str) -> bool:
        return any(e["ev"] == name for e in self.events)

    def ops(self) -> list[dict[str, str]]:
        return [e for e in self.events if e["ev"] == "op"]

    def us(self, name: str, key: str) -> int:
        """A time of event `name`, in microseconds since just before the load."""
        return int(self.event(name)[key])


@dataclass
class PartialRig:
    """The load rig (controller, nodes) with PartialMergeCheck compiled, and a scratch directory."""

    setup: Setup
    classpath: str
    tmp: Path
    runs: int = 0

    def java(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            ["java", "-Xmx512m", "-cp", self.classpath, "io.statestore.spark.PartialMergeCheck", *args],
            capture_output=True, text=True, timeout=timeout,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
        return result.stdout

    def history(self, name: str, flavour: str, versions: int, keys: int = 0) -> Path:
        """A template state root holding versions 1..`versions` of the partition, written by the provider."""
        root = self.tmp / f"history-{name}"
        self.java("history", str(root), str(PARTITION), str(self.tmp / f"writer-{name}"), flavour, str(versions),
                  str(keys))
        return root

    def copy(self, template: Path, label: str, replica_at: int) -> Path:
        """A state root copied from `template`, and the node handed a replica of it at version `replica_at`."""
        root = self.tmp / f"root-{label}"
        shutil.copytree(template, root)
        location = CheckpointLocation(root / "0" / str(PARTITION), f"0/{PARTITION}/default")
        replica = location.restore(self.tmp / f"replica-{label}", version=replica_at, options=OPTIONS)
        version, lineage, path = replica.version, replica.lineage, replica.path
        replica.close()
        frame = encode_demote(Demote(location.store_id, str(location.path), version, lineage, str(path)))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(20)
            conn.connect(str(self.setup.sockets["n"]))
            conn.sendall(frame)
            received = read_frame(conn)
        assert received is not None
        reply = decode_reply(received[1])
        assert reply.status == STATUS_ACCEPTED and "adopted" in reply.message, reply
        return root

    def batches(self, runs: list[Run], timeout: float = 600) -> dict[str, Outcome]:
        """Runs the batches one after another in one JVM; their outcomes by label."""
        lines = []
        for run in runs:
            script = self.tmp / f"script-{run.label}.txt"
            script.write_text("\n".join(run.script) + "\n")
            faults = [f"last-increment delay {run.delay_ms}"] if run.delay_ms else []
            if run.apply_delay_ms:
                faults.append(f"last-increment-apply delay {run.apply_delay_ms}")
            fault = ";".join(faults) or "-"
            lines.append("\t".join([
                run.label, str(run.root), str(PARTITION), str(self.tmp / f"local-{run.label}"),
                str(self.setup.sockets["n"]), str(run.version), str(run.partial_merge).lower(),
                str(self.tmp / f"faults-{run.label}"), fault, str(script),
                str(self.tmp / f"dump-{run.label}.txt") if run.dump else "-",
            ]))
        spec = self.tmp / f"runs-{self.runs}.tsv"
        self.runs += 1
        spec.write_text("\n".join(lines) + "\n")
        stdout = self.java("batch", str(spec), timeout=timeout)
        outcomes = {run.label: Outcome(run) for run in runs}
        for line in stdout.splitlines():
            if line.startswith("run="):
                event = parse_event(line)
                outcomes[event["run"]].events.append(event)
        for run in runs:
            dump = self.tmp / f"dump-{run.label}.txt"
            outcomes[run.label].dump = dump.read_text() if dump.exists() else ""
        return outcomes


def parse_event(line: str) -> dict[str, str]:
    """`run=a ev=op i=3 ... summary=free text`: a `summary` or `message` field takes the rest of the line."""
    event: dict[str, str] = {}
    words = line.split(" ")
    for i, word in enumerate(words):
        key, _, value = word.partition("=")
        if key in ("summary", "message"):
            event[key] = " ".join([value, *words[i + 1:]])
            break
        event[key] = value
    return event


@contextlib.contextmanager
def partial_rig(tmp: Path) -> Iterator[PartialRig]:
    """The load rig (tests/test_load_sources_harness.py) and PartialMergeCheck compiled, under `tmp`."""
    (tmp / "rig").mkdir()
    with load_rig(tmp / "rig", provider_dir=tmp) as setup:  # the runs' local dirs are beside the rig
        classes = tmp / "pm-classes"
        classes.mkdir()
        subprocess.run(["javac", "--release", "17", "-nowarn", "-cp", setup.classpath, "-d", str(classes),
                        str(DRIVER / "PartialMergeCheck.java")], check=True, capture_output=True, text=True)
        yield PartialRig(setup, f"{classes}:{setup.classpath}", tmp)
