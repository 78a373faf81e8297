"""Property test: random engine histories against a plain Python model.

Random sequences of put/delete/merge/column-family changes/commit/abort/snapshot/restore run on a real
store and its checkpoint location; every committed version, restored from every possible starting
point (the empty store and each snapshot at or below it), must equal the model's state at that version.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statestore import CheckpointLocation, VersionedStore
from statestore.increment import decode_increment, encode_increment

STORE_ID = "7/3/default"
KEYS = st.binary(min_size=0, max_size=3)
VALUES = st.binary(min_size=0, max_size=4)
FAMILIES = st.sampled_from(["default", "cf_a", "cf_b"])

Model = dict[str, dict[bytes, bytes]]


def _copy(model: Model) -> Model:
    return {cf: dict(pairs) for cf, pairs in model.items()}


def _content(store: VersionedStore) -> Model:
    return {cf: dict(store.items(cf)) for cf in store.column_families()}


class EngineHistory(RuleBasedStateMachine):
    """One store partition driven at random, checked against `committed` and `pending` models."""

    def __init__(self) -> None:
        super().__init__()
        self.workdir = Path(tempfile.mkdtemp(prefix="engine-model-"))
        self.location = CheckpointLocation(self.workdir / "checkpoint", STORE_ID, compress=False)
        self.store = VersionedStore.open(self.workdir / "primary", STORE_ID)
        self.replica = VersionedStore.open(self.workdir / "replica", STORE_ID)
        self.committed: Model = {"default": {}}
        self.pending: Model = {"default": {}}
        self.history: dict[int, Model] = {0: {"default": {}}}
        self.restores = 0

    def teardown(self) -> None:
        self.store.close()
        self.replica.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # --- writes into the open transaction

    @rule(cf=FAMILIES, key=KEYS, value=VALUES)
    def put(self, cf: str, key: bytes, value: bytes) -> None:
        if cf in self.pending:
            self.store.put(key, value, cf)
            self.pending[cf][key] = value

    @rule(cf=FAMILIES, key=KEYS)
    def delete(self, cf: str, key: bytes) -> None:
        if cf in self.pending:
            self.store.delete(key, cf)
            self.pending[cf].pop(key, None)

    @rule(cf=FAMILIES, key=KEYS, operand=VALUES)
    def merge(self, cf: str, key: bytes, operand: bytes) -> None:
        if cf in self.pending:
            self.store.merge(key, operand, cf)
            self.pending[cf][key] = self.pending[cf].get(key, b"") + operand

    @rule(cf=st.sampled_from(["cf_a", "cf_b"]))
    def create_column_family(self, cf: str) -> None:
        self.store.create_column_family(cf)
        self.pending.setdefault(cf, {})

    @rule(cf=st.sampled_from(["cf_a", "cf_b"]))
    def drop_column_family(self, cf: str) -> None:
        existed = self.store.drop_column_family(cf)
        assert existed == (cf in self.pending)
        self.pending.pop(cf, None)

    # --- versions

    @rule(compress=st.booleans())
    def commit(self, compress: bool) -> None:
        self.location.compress = compress
        increment = self.location.commit(self.store)
        assert increment.version == self.store.version
        self.committed = _copy(self.pending)
        self.history[self.store.version] = _copy(self.committed)
        # A replica fed with the increment's bytes follows the primary exactly.
        assert self.replica.apply(decode_increment(encode_increment(increment, compress=compress)))

    @rule()
    def abort(self) -> None:
        self.store.abort()
        self.pending = _copy(self.committed)

    @precondition(lambda self: self.store.version > 0)
    @rule()
    def snapshot(self) -> None:
        self.store.abort()
        self.pending = _copy(self.committed)
        manifest = self.location.write_snapshot(self.store)
        assert manifest.version == self.store.version

    @precondition(lambda self: self.store.version > 0)
    @rule(data=st.data())
    def restore_primary_to_an_older_version(self, data: st.DataObject) -> None:
        """Roll the primary back, as Spark does when it reloads an earlier version."""
        version = data.draw(st.integers(min_value=0, max_value=self.store.version))
        path = self.store.path
        self.store.close()
        self.store = self.location.restore(path, version)
        self.committed = _copy(self.history[version])
        self.pending = _copy(self.committed)
        for later in [v for v in self.history if v > version]:
            del self.history[later]
        # Later increments are overwritten by the new history, as Spark rewrites them on replay.
        self.replica.close()
        shutil.rmtree(self.workdir / "replica")
        self.replica = self.location.restore(self.workdir / "replica", version)

    # --- what must always hold

    @invariant()
    def reads_see_the_open_transaction(self) -> None:
        assert _content(self.store) == self.pending
        for cf, pairs in self.pending.items():
            assert self.store.count(cf) == len(pairs)
            for key, value in list(pairs.items())[:3]:
                assert self.store.get(key, cf) == value

    @invariant()
    def replica_equals_committed(self) -> None:
        assert self.replica.version == self.store.version
        assert _content(self.replica) == self.committed
        assert all(self.replica.count(cf) == len(pairs) for cf, pairs in self.committed.items())

    def check_every_version_from_every_start(self) -> None:
        starts = [0, *self.location.snapshot_versions()]
        for version, expected in self.history.items():
            for start in (s for s in starts if s <= version):
                self.restores += 1
                local = self.workdir / f"restore-{self.restores}"
                if start == 0:
                    restored = VersionedStore.open(local, STORE_ID)
                    self.location.catch_up(restored, version)
                else:
                    snapshot_only = CheckpointLocation(self.location.path, STORE_ID)
                    restored = snapshot_only.restore(local, start)
                    snapshot_only.catch_up(restored, version)
                assert restored.version == version
                assert _content(restored) == expected, f"version {version} restored from {start}"
                assert all(restored.count(cf) == len(pairs) for cf, pairs in expected.items())
                restored.close()
                shutil.rmtree(local)

    @precondition(lambda self: len(self.history) > 1)
    @rule()
    def every_committed_version_restores_from_every_start(self) -> None:
        self.check_every_version_from_every_start()


EngineHistory.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineHistory = EngineHistory.TestCase
