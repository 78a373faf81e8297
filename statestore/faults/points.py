"""Named fault points in the state nodes and the controller, for tests and the fault suite that must disturb a
process at an exact protocol step. The Python twin of the provider's `Faults.java`, with the same file format.

Off unless the process was started with `STATESTORE_FAULTS_FILE` naming a file (read once, at import: an unarmed
point costs one comparison). Then, at each point, the file is looked for; when a line names this point (and
partition), the first process to claim that line (it renames the file away, and puts the other lines back: one
shot) acts. A line is `<point> <action> [<millis>] [<partition id>]`:

- `kill`: SIGKILL of this process;
- `pause`: SIGSTOP of this process (a test resumes it with SIGCONT);
- `raise`: the step fails with `FaultInjected`, which the caller handles as any failure of that step;
- `delay <millis>`: the thread reaching the point sleeps that long.

Points (`POINTS`): in a node, `ship` (an increment from the local primary is verified, not yet logged or sent to
the replicas), `apply` (a replica received an increment and is about to apply it), `applied` (applied, not yet
acked), `materialize` (about to write its copy for the provider), `promote` (about to become a partition's
primary), `bootstrap-serve` (about to stream a snapshot to a peer); in the controller, `heartbeat` (a node's
heartbeat received, not yet recorded).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from statestore.errors import StateStoreError

FAULTS_ENV = "STATESTORE_FAULTS_FILE"
POINTS = ("ship", "apply", "applied", "materialize", "promote", "bootstrap-serve", "heartbeat")
ACTIONS = ("kill", "pause", "raise", "delay")

_log = logging.getLogger("statestore.faults")
_file: str | None = os.environ.get(FAULTS_ENV) or None


class FaultInjected(StateStoreError):
    """A `raise` fault point fired: the step it guards fails."""


def fault_point(point: str, store_id: str = "") -> None:
    """Act if the faults file is armed for `point` (and the partition of `store_id`, `<op>/<partition>/<name>`)."""
    if _file is None:
        return
    _act(_file, point, store_id)


def arm(path: str | None) -> None:
    """Use the faults file at `path` from now on (None: off); for tests running points in their own process."""
    global _file
    _file = path


def _partition_of(store_id: str) -> str:
    parts = store_id.split("/")
    return parts[1] if len(parts) >= 3 else ""


def _act(path: str, point: str, store_id: str) -> None:
    file = Path(path)
    try:
        lines = [line.split() for line in file.read_text().splitlines() if line.strip()]
    except OSError:
        return  # not armed, or claimed by another process meanwhile
    partition = _partition_of(store_id)
    for index, words in enumerate(lines):
        if words[0] != point or len(words) < 2 or words[1] not in ACTIONS:
            continue
        rest = words[2:]
        millis = 0
        if words[1] == "delay":
            if not rest or not rest[0].isdigit():
                _log.warning("fault point %s: bad line %r in %s: expected '%s delay <millis> [<partition>]'", point,
                             " ".join(words), path, point)  # fmt: skip
                return
            millis, rest = int(rest[0]), rest[1:]
        if rest and rest[0] != partition:
            continue
        if _claim(file, lines, index):
            _fire(point, words[1], millis, store_id)
        return


def _claim(file: Path, lines: list[list[str]], index: int) -> bool:
    """Take line `index` (rename the file away, put the other lines back); False if another process was first."""
    claimed = file.with_name(f"{file.name}.claimed-{os.getpid()}-{time.monotonic_ns()}")
    try:
        file.rename(claimed)
    except OSError:
        return False
    rest = [" ".join(words) for i, words in enumerate(lines) if i != index]
    if rest:
        staging = file.with_name(f"{file.name}.rest-{os.getpid()}")
        staging.write_text("\n".join(rest) + "\n")
        staging.rename(file)
    claimed.unlink(missing_ok=True)
    return True


def _fire(point: str, action: str, millis: int, store_id: str) -> None:
    _log.warning("fault point %s of %s: %s%s", point, store_id or "-", action, f" {millis} ms" if millis else "")
    for handler in logging.getLogger("statestore").handlers:
        handler.flush()
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "delay":
        time.sleep(millis / 1000)
    else:
        raise FaultInjected(f"fault point {point} of {store_id or '-'}: injected failure")
