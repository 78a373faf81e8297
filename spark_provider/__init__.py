"""The Spark side of statestore: a Java StateStoreProvider on RocksDB, built and enabled from Python."""

import statestore  # noqa: F401  (first: it sets gRPC's fork setting before grpc loads)
from spark_provider.jar import JarBuildError, provider_jar
from spark_provider.operate import drain, move, rebalance, status
from spark_provider.session import enable
from spark_provider.settings import PROVIDER_CLASS, SETTINGS, SettingError

__all__ = [
    "PROVIDER_CLASS", "SETTINGS", "JarBuildError", "SettingError",
    "drain", "enable", "move", "provider_jar", "rebalance", "status",
]  # fmt: skip
