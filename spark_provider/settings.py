"""The provider's documented settings: Spark configuration keys, defaults and meanings, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_provider.setting_values import BadValue, Kind, SettingError
from spark_provider.settings_table import SETTING_ROWS

PROVIDER_CLASS = "io.statestore.spark.StatestoreProvider"
# Starts each executor's state node with the executor (spark.plugins).
PLUGIN_CLASS = "io.statestore.spark.StatestorePlugin"
# Steers a restarted query's partitions before its first batch (spark.sql.streaming.streamingQueryListeners).
QUERY_LISTENER_CLASS = "io.statestore.spark.QueryStarts"
QUERY_LISTENERS_KEY = "spark.sql.streaming.streamingQueryListeners"
SPARK_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PREFIX = "spark.sql.streaming.stateStore.statestore."


@dataclass(frozen=True)
class Setting:
    """One setting: the keyword `enable()` accepts, its Spark key, default, meaning and the values it accepts."""

    name: str
    key: str
    default: str | None
    doc: str
    kind: Kind

    def conf(self, value: object, given_as: str = "") -> str:
        """`value` as the conf string the provider reads; a SettingError names the setting (as `given_as`: the
        keyword or the Spark key the user set), the value and what is allowed."""
        try:
            return self.kind.conf(value)
        except BadValue as exc:
            label = given_as or f"{self.name} ({self.key})"
            raise SettingError(f"statestore setting {label} is {value!r}: expected {exc}") from None


# Generated from protos/contract/provider_settings.toml, as the provider's SettingsTable.java.
SETTINGS: tuple[Setting, ...] = tuple(Setting(*row) for row in SETTING_ROWS)

BY_NAME = {s.name: s for s in SETTINGS}


BY_KEY = {s.key: s for s in SETTINGS}


def spark_confs(existing: Mapping[str, str] | None = None, **overrides: object) -> dict[str, str]:
    """The Spark confs for our settings: defaults, then the values of our keys in `existing` (the confs the
    builder or session already has: a user's `.config(...)` is kept, not overwritten by a default), then
    `overrides` (keyword names of SETTINGS). Every value is checked: a SettingError names the setting, the value
    and what is allowed; a TypeError an unknown keyword, a SettingError an unknown key under our prefix."""
    unknown = sorted(set(overrides) - set(BY_NAME))
    if unknown:
        raise TypeError(f"unknown statestore setting(s) {unknown}; known: {sorted(BY_NAME)}")
    existing = existing or {}
    for key in sorted(k for k in existing if k.startswith(PREFIX) and k not in BY_KEY):
        known = ", ".join(sorted(k.removeprefix(PREFIX) for k in BY_KEY if k.startswith(PREFIX)))
        raise SettingError(
            f"unknown statestore setting {key} (set to {existing[key]!r}); known under {PREFIX}: {known}"
        )
    confs: dict[str, str] = {}
    for s in SETTINGS:
        if s.name in overrides:
            if overrides[s.name] is not None:
                confs[s.key] = s.conf(overrides[s.name])
        elif s.key in existing:
            confs[s.key] = s.conf(existing[s.key], given_as=s.key)
        elif s.default is not None:
            confs[s.key] = s.default
    return confs
