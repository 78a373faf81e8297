"""The one file system layer every read and write of a checkpoint location goes through (docs/deploy.md).

A checkpoint location is named as Spark users name it: a local path or `file:` URI, or `s3a://` (`s3n://`,
`s3://`) for S3, `abfss://` (`abfs://`) for Azure Data Lake Storage Gen2, `gs://` for Google Cloud Storage,
`hdfs://` for HDFS. `resolve` maps it to a `CheckpointFS` and the path of the location on it:

- local paths use plain `os` calls (the engine's and the restore path's fast path, durable with fsync);
- every other scheme uses `pyarrow.fs` (Apache Arrow's C++ file systems on the vendors' SDKs and on Hadoop's
  own Java client for HDFS), created on first use and shared by every location of the same bucket, account or
  name node. Credentials come from where the vendors' tools look for them (environment, config files,
  instance metadata); see `docs/deploy.md`.

A path here is a string in the file system's own namespace: an OS path for local locations, `bucket/key` for
object stores, `/path` for HDFS. `CheckpointFS.uri` turns it back into the URI a message names.

Missing files raise FileNotFoundError. Every other failure of a remote file system raises CheckpointFSError,
naming the URI, the operation and what to check (credentials, endpoint, bucket); it is an OSError too, so code
that handled local I/O errors handles remote ones alike. Never a silent fallback.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from statestore.errors import StateStoreError

# Scheme as a user writes it -> the file system that serves it.
SCHEMES: dict[str, str] = {
    "file": "local",
    "s3a": "s3",
    "s3n": "s3",
    "s3": "s3",
    "abfss": "azure",
    "abfs": "azure",
    "gs": "gcs",
    "hdfs": "hdfs",
}
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/")
# Environment variables a remote file system is built from: a change makes a new one (tests, rotated keys).
_ENV = {
    "s3": (
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CA_BUNDLE",
    ),
    "azure": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"),
    "gcs": ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"),
    "hdfs": ("JAVA_HOME", "CLASSPATH", "HADOOP_HOME", "ARROW_LIBHDFS_DIR", "HADOOP_USER_NAME", "KRB5CCNAME"),
}


class CheckpointFSError(StateStoreError, OSError):
    """A checkpoint location that cannot be used: its URI, the operation, and what is wrong or missing."""

    def __init__(self, uri: str, problem: str) -> None:
        super().__init__(f"{uri}: {problem}")
        self.uri = uri
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.uri}: {self.problem}"


class UnsupportedLocationError(CheckpointFSError):
    """A checkpoint location whose scheme no file system here serves."""


@dataclass(frozen=True)
class Entry:
    """One entry of a directory listing."""

    name: str
    is_dir: bool
    size: int


class CheckpointFS(ABC):
    """The operations the engine and the nodes perform on a checkpoint location's file system."""

    #: Whether this is the local file system (paths are OS paths; RocksDB and hard links may use them).
    is_local: bool = False
    #: Whether renaming a directory is atomic (snapshots are then staged and renamed into place).
    atomic_rename: bool = False

    def join(self, path: str, *names: str) -> str:
        """`path` with `names` appended, each a single name."""
        return "/".join([path.rstrip("/"), *names]) if path else "/".join(names)

    def uri(self, path: str) -> str:
        """The URI of `path` as the user names it (what messages show)."""
        return path

    @abstractmethod
    def open_input(self, path: str) -> BinaryIO:
        """A binary stream reading the file `path` (FileNotFoundError when absent); close it after use."""

    def read_bytes(self, path: str) -> bytes:
        """The whole file `path` (FileNotFoundError when absent)."""
        with self.open_input(path) as source:
            return source.read()

    def read_prefix(self, path: str, size: int) -> bytes:
        """At most the first `size` bytes of the file `path` (FileNotFoundError when absent)."""
        with self.open_input(path) as source:
            return source.read(size)

    @abstractmethod
    def list_dir(self, path: str) -> list[Entry]:
        """The entries directly in directory `path`; empty when it does not exist."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or directory is at `path`."""

    @abstractmethod
    def size(self, path: str) -> int:
        """The size of the file `path` in bytes (FileNotFoundError when absent)."""

    @abstractmethod
    def open_output(self, path: str) -> BinaryIO:
        """A binary stream writing the file `path` (replacing it; parents created). Not atomic: see
        `write_atomically`. Closing it makes the file durable."""

    @abstractmethod
    def write_atomically(self, path: str, data: bytes) -> None:
        """Write the file `path` whole or not at all (readers never see a part of it), durably."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete the file or directory tree at `path`; nothing when it does not exist."""

    @abstractmethod
    def make_dirs(self, path: str) -> None:
        """Create directory `path` and its parents (a no-op on object stores)."""

    def rename(self, source: str, target: str) -> None:
        """Rename `source` to `target` (only where `atomic_rename`)."""
        raise NotImplementedError(f"{self.uri(source)}: renaming is not atomic on this file system")


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalFS(CheckpointFS):
    """The local file system through plain `os` calls: what checkpoint locations on local disks always used."""

    is_local = True
    atomic_rename = True

    def join(self, path: str, *names: str) -> str:
        """`path` with `names` appended (`os.path.join`)."""
        return os.path.join(path, *names)

    def open_input(self, path: str) -> BinaryIO:
        """The file opened for reading."""
        return open(path, "rb")

    def list_dir(self, path: str) -> list[Entry]:
        """The directory's entries (`os.scandir`); empty when it is not a directory."""
        try:
            with os.scandir(path) as entries:
                return [Entry(e.name, e.is_dir(), 0) for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, path: str) -> bool:
        """`os.path.exists`."""
        return os.path.exists(path)

    def size(self, path: str) -> int:
        """`os.stat(path).st_size`."""
        return os.stat(path).st_size

    def open_output(self, path: str) -> BinaryIO:
        """The file opened for writing, fsync'd on close."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return _DurableFile(path)

    def write_atomically(self, path: str, data: bytes) -> None:
        """Written to a staging sibling, fsync'd, renamed into place, the directory fsync'd."""
        parent = os.path.dirname(path) or "."
        staging = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(parent, exist_ok=True)
            with open(staging, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(staging, path)
            _fsync_directory(parent)
        except BaseException:
            Path(staging).unlink(missing_ok=True)
            raise

    def delete(self, path: str) -> None:
        """`shutil.rmtree` for a directory, else unlink."""
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            Path(path).unlink(missing_ok=True)

    def make_dirs(self, path: str) -> None:
        """`os.makedirs`."""
        os.makedirs(path, exist_ok=True)

    def rename(self, source: str, target: str) -> None:
        """`os.rename`, the target's directory fsync'd."""
        os.rename(source, target)
        _fsync_directory(os.path.dirname(target) or ".")


class _DurableFile:
    """A file opened for writing whose close flushes and fsyncs it."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "wb")  # noqa: SIM115

    def write(self, data: bytes) -> int:
        return self._file.write(data)

    def close(self) -> None:
        if not self._file.closed:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            finally:
                self._file.close()

    def __enter__(self) -> _DurableFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


LOCAL = LocalFS()


# ------------------------------------------------------------------------------------------ remote file systems


def _hint(kind: str, message: str) -> str:
    """What to check, judging by a remote file system's error message."""
    if kind == "s3":
        if re.search(r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|EXPIRED_TOKEN|\b403\b", message):
            return (
                " (the credentials were refused: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, "
                "AWS_PROFILE or ~/.aws/credentials, and the bucket's policy)"
            )
        if re.search(r"NETWORK_CONNECTION|curlCode|Could not resolve|Couldn't connect", message):
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS's default"
            return f" (the S3 endpoint ({endpoint}) is unreachable: check AWS_ENDPOINT_URL and AWS_REGION)"
        if "NO_SUCH_BUCKET" in message:
            return " (the bucket does not exist)"
    if kind == "azure" and re.search(r"401|403|AuthenticationFailed|AuthorizationFailure|credential", message):
        return (
            " (the credentials were refused: check AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or "
            "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, a managed identity or `az login`)"
        )
    if kind == "gcs" and re.search(r"401|403|PERMISSION_DENIED|UNAUTHENTICATED|credentials", message):
        return " (the credentials were refused: check GOOGLE_APPLICATION_CREDENTIALS or the instance's service account)"
    return ""


class ArrowFS(CheckpointFS):
    """A remote file system through `pyarrow.fs`, built on first use (one per bucket, account or name node)."""

    def __init__(self, kind: str, scheme: str, authority: str) -> None:
        self.kind = kind
        self.scheme = scheme
        self.authority = authority
        self.atomic_rename = kind == "hdfs"

    # ------------------------------------------------------------- names

    def uri(self, path: str) -> str:
        """`s3a://bucket/key`, `abfss://container@account.dfs.core.windows.net/key`, `gs://bucket/key`,
        `hdfs://namenode:port/path`."""
        if self.kind == "azure":
            container, _, key = path.partition("/")
            return f"{self.scheme}://{container}@{self.authority}/{key}"
        if self.kind == "hdfs":
            return f"{self.scheme}://{self.authority}{path}"
        return f"{self.scheme}://{path}"

    # ------------------------------------------------------------- the pyarrow file system

    @property
    def arrow(self) -> Any:
        """The `pyarrow.fs.FileSystem` (created, or taken from the cache, on first use)."""
        return _arrow_filesystem(self.kind, self.scheme, self.authority)

    def _failed(self, path: str, operation: str, exc: BaseException) -> CheckpointFSError:
        message = str(exc)
        return CheckpointFSError(self.uri(path), f"{operation} failed: {message}{_hint(self.kind, message)}")

    def _container(self, path: str) -> str:
        return path.split("/", 1)[0] if self.kind in ("s3", "gcs", "azure") else ""

    def _not_found(self, path: str) -> None:
        """Called when `path` was not found: raises a clear error if its bucket (container) is missing, since
        object stores answer "not found" for every key of a bucket that does not exist."""
        container = self._container(path)
        seen = (*_settings_key(self.kind, self.authority), container)
        if not container or seen in _containers_seen:
            return
        from pyarrow import fs as pafs

        try:
            found = self.arrow.get_file_info(container).type != pafs.FileType.NotFound
        except OSError as exc:
            raise self._failed(path, f"checking {self.kind} bucket {container!r}", exc) from exc
        if not found:
            what = "container" if self.kind == "azure" else "bucket"
            where = _endpoint_note(self.kind)
            raise CheckpointFSError(self.uri(path), f"{what} {container!r} does not exist{where}")
        _containers_seen.add(seen)

    # ------------------------------------------------------------- operations

    @contextlib.contextmanager
    def _errors(self, path: str, operation: str) -> Iterator[None]:
        """Turns a pyarrow error into a CheckpointFSError naming `path` and `operation` (FileNotFoundError and
        errors already named pass)."""
        try:
            yield
        except (CheckpointFSError, FileNotFoundError):
            raise
        except OSError as exc:
            raise self._failed(path, operation, exc) from exc

    def open_input(self, path: str) -> BinaryIO:
        """The object opened for streaming reads."""
        arrow = self.arrow
        try:
            with self._errors(path, "opening for reading"):
                return arrow.open_input_stream(path)
        except FileNotFoundError:
            self._not_found(path)
            raise FileNotFoundError(2, "No such file", self.uri(path)) from None

    def read_bytes(self, path: str) -> bytes:
        """The whole object."""
        with self.open_input(path) as source, self._errors(path, "reading"):
            return source.read()

    def read_prefix(self, path: str, size: int) -> bytes:
        """The object's first `size` bytes."""
        with self.open_input(path) as source, self._errors(path, "reading"):
            return source.read(size)

    def list_dir(self, path: str) -> list[Entry]:
        """One listing (for object stores: of the keys and common prefixes directly under `path/`)."""
        from pyarrow import fs as pafs

        arrow = self.arrow
        with self._errors(path, "listing"):
            infos = arrow.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
        if not infos:
            self._not_found(path)
        return [
            Entry(info.base_name, info.type == pafs.FileType.Directory, info.size or 0)
            for info in infos
            if info.type != pafs.FileType.NotFound
        ]

    def _info(self, path: str, operation: str) -> Any:
        arrow = self.arrow
        with self._errors(path, operation):
            return arrow.get_file_info(path)

    def exists(self, path: str) -> bool:
        """Whether a file or directory (a key prefix, on object stores) is at `path`."""
        from pyarrow import fs as pafs

        if self._info(path, "checking existence").type != pafs.FileType.NotFound:
            return True
        self._not_found(path)
        return False

    def size(self, path: str) -> int:
        """The object's size."""
        from pyarrow import fs as pafs

        info = self._info(path, "reading the size")
        if info.type == pafs.FileType.NotFound:
            self._not_found(path)
            raise FileNotFoundError(2, "No such file", self.uri(path))
        return int(info.size or 0)

    def open_output(self, path: str) -> BinaryIO:
        """The object opened for writing: it appears when the stream is closed."""
        arrow = self.arrow
        with self._errors(path, "opening for writing"):
            if self.kind == "hdfs":
                arrow.create_dir(path.rsplit("/", 1)[0], recursive=True)
            return arrow.open_output_stream(path)

    def write_atomically(self, path: str, data: bytes) -> None:
        """An object store's single upload is atomic; on HDFS the file is staged and renamed into place."""
        arrow = self.arrow
        if not self.atomic_rename:
            with self._errors(path, "writing"), self.open_output(path) as out:
                out.write(data)
            return
        parent, _, name = path.rpartition("/")
        staging = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            with self._errors(path, "writing"):
                with self.open_output(staging) as out:
                    out.write(data)
                arrow.move(staging, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.delete(staging)
            raise

    def delete(self, path: str) -> None:
        """The object, or every object under the prefix `path/`."""
        from pyarrow import fs as pafs

        info = self._info(path, "deleting")
        arrow = self.arrow
        try:
            with self._errors(path, "deleting"):
                if info.type == pafs.FileType.Directory:
                    arrow.delete_dir(path)
                elif info.type != pafs.FileType.NotFound:
                    arrow.delete_file(path)
        except FileNotFoundError:
            return

    def make_dirs(self, path: str) -> None:
        """A directory on HDFS; nothing on object stores (a key's prefixes are its directories)."""
        if self.kind == "hdfs":
            arrow = self.arrow
            with self._errors(path, "creating the directory"):
                arrow.create_dir(path, recursive=True)

    def rename(self, source: str, target: str) -> None:
        """HDFS's atomic rename."""
        if not self.atomic_rename:
            super().rename(source, target)
        arrow = self.arrow
        with self._errors(source, f"renaming to {self.uri(target)}"):
            arrow.move(source, target)


def _endpoint_note(kind: str) -> str:
    if kind != "s3":
        return ""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return f" (at endpoint {endpoint})" if endpoint else ""


_cache: dict[tuple[Any, ...], Any] = {}
# Buckets (containers) found to exist: a key not found in them is just not there.
_containers_seen: set[tuple[Any, ...]] = set()
_cache_lock = threading.Lock()


def _settings_key(kind: str, authority: str) -> tuple[Any, ...]:
    """What a remote file system is built from: its kind, authority and environment settings."""
    return (kind, authority, tuple(os.environ.get(name) for name in _ENV[kind]))


def _arrow_filesystem(kind: str, scheme: str, authority: str) -> Any:
    """The pyarrow file system of `kind` for `authority`, shared while the settings it was built from hold."""
    key = _settings_key(kind, authority)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = _BUILDERS[kind](scheme, authority)
        return found


def _s3(scheme: str, bucket: str) -> Any:
    """S3 (and S3-compatible servers): endpoint, region and credentials from the standard AWS settings."""
    from pyarrow import fs as pafs

    options: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        # Path-style addressing (bucket in the path) is what pyarrow uses with an endpoint: as Hadoop's
        # fs.s3a.path.style.access=true, which S3-compatible servers (MinIO, Ceph) expect.
        options.update(endpoint_override=parsed.netloc + parsed.path.rstrip("/"), scheme=parsed.scheme)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region and not endpoint:
        try:  # AWS itself: the bucket's region, as s3a finds it
            region = pafs.resolve_s3_region(bucket)
        except OSError:
            region = None  # left to the AWS SDK (profile, instance metadata)
    if region:
        options["region"] = region
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        options.update(access_key=key, secret_key=secret, session_token=os.environ.get("AWS_SESSION_TOKEN"))
    if os.environ.get("AWS_CA_BUNDLE"):
        options["tls_ca_file_path"] = os.environ["AWS_CA_BUNDLE"]
    try:
        return pafs.S3FileSystem(**options)
    except (OSError, ValueError) as exc:
        raise CheckpointFSError(f"{scheme}://{bucket}", f"the S3 client cannot start: {exc}") from exc


def _azure(scheme: str, authority: str) -> Any:
    """ADLS Gen2 / Blob storage: `container@account.dfs.core.windows.net`; an account key or SAS token from the
    environment, else Azure's default credential chain."""
    from pyarrow import fs as pafs

    host = authority.partition("@")[2]
    account, _, suffix = host.partition(".")
    if not account:
        raise CheckpointFSError(
            f"{scheme}://{authority}", "names no storage account (expected container@account.dfs.core.windows.net)"
        )
    options: dict[str, Any] = {}
    if suffix and suffix != "dfs.core.windows.net":  # another cloud, or an emulator
        options["dfs_storage_authority"] = f".{suffix}"
        options["blob_storage_authority"] = f".{suffix.replace('dfs.', 'blob.', 1)}"
    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_KEY")
    if key:
        options["account_key"] = key
    elif os.environ.get("AZURE_STORAGE_SAS_TOKEN"):
        options["sas_token"] = os.environ["AZURE_STORAGE_SAS_TOKEN"]
    try:
        return pafs.AzureFileSystem(account, **options)
    except (OSError, ValueError, ImportError) as exc:
        raise CheckpointFSError(f"{scheme}://{authority}", f"the Azure client cannot start: {exc}") from exc


def _gcs(scheme: str, bucket: str) -> Any:
    """Google Cloud Storage with Google's application default credentials (an emulator via
    STORAGE_EMULATOR_HOST)."""
    from pyarrow import fs as pafs

    options: dict[str, Any] = {}
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        parsed = urlparse(emulator if "://" in emulator else f"http://{emulator}")
        options.update(endpoint_override=parsed.netloc, scheme=parsed.scheme, anonymous=True)
    try:
        return pafs.GcsFileSystem(**options)
    except (OSError, ValueError, ImportError) as exc:
        raise CheckpointFSError(f"{scheme}://{bucket}", f"the GCS client cannot start: {exc}") from exc


def hdfs_missing_settings() -> list[str]:
    """What the HDFS client (Hadoop's Java client through libhdfs and JNI) lacks in this environment."""
    missing = []
    if not os.environ.get("JAVA_HOME"):
        missing.append("JAVA_HOME is not set (a JDK or JRE to run Hadoop's client in)")
    if "hadoop" not in os.environ.get("CLASSPATH", "").lower():
        missing.append("CLASSPATH holds no Hadoop jars (set it to the output of `hadoop classpath --glob`)")
    library_dirs = [os.environ.get("ARROW_LIBHDFS_DIR", "")]
    if os.environ.get("HADOOP_HOME"):
        library_dirs.append(os.path.join(os.environ["HADOOP_HOME"], "lib", "native"))
    if not any(d and os.path.exists(os.path.join(d, "libhdfs.so")) for d in library_dirs):
        missing.append("libhdfs.so is not found (set HADOOP_HOME, or ARROW_LIBHDFS_DIR to its directory)")
    return missing


def _hdfs(scheme: str, authority: str) -> Any:
    """HDFS through libhdfs; `hdfs:///path` uses fs.defaultFS of the Hadoop configuration."""
    from pyarrow import fs as pafs

    uri = f"{scheme}://{authority}"
    missing = hdfs_missing_settings()
    if missing:
        raise CheckpointFSError(uri, "the HDFS client cannot start: " + "; ".join(missing))
    host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    ticket_cache = os.environ.get("KRB5CCNAME", "").removeprefix("FILE:") or None
    try:
        return pafs.HadoopFileSystem(
            host or "default",
            int(port) if port else (0 if not host else 8020),
            user=os.environ.get("HADOOP_USER_NAME"),
            kerb_ticket=ticket_cache,
        )
    except (OSError, ValueError) as exc:
        raise CheckpointFSError(uri, f"the HDFS client cannot connect: {exc}") from exc


_BUILDERS = {"s3": _s3, "azure": _azure, "gcs": _gcs, "hdfs": _hdfs}


# ------------------------------------------------------------------------------------------ resolving a location


def scheme_of(location: str) -> str:
    """The URI scheme of a checkpoint location ("" for a plain local path)."""
    match = _URI.match(location)
    return match.group("scheme").lower() if match else ""


def is_local(location: str | Path) -> bool:
    """Whether a checkpoint location is on the local file system (a path or a `file:` URI)."""
    return isinstance(location, Path) or scheme_of(location) in ("", "file")


def resolve(location: str | Path) -> tuple[CheckpointFS, str]:
    """The file system of a checkpoint location and the location's path on it.

    Raises UnsupportedLocationError for a scheme no file system here serves, naming the supported ones.
    """
    if isinstance(location, Path):
        return LOCAL, str(location)
    scheme = scheme_of(location)
    if not scheme:
        return LOCAL, str(Path(location)) if location else location
    kind = SCHEMES.get(scheme)
    if kind is None:
        supported = ", ".join(f"{s}:" for s in SCHEMES)
        raise UnsupportedLocationError(
            location, f"unsupported checkpoint location scheme {scheme!r} (supported: {supported} and plain paths)"
        )
    parsed = urlparse(location)
    if kind == "local":
        return LOCAL, str(Path(unquote(parsed.path)))
    key = unquote(parsed.path).strip("/")
    if kind == "hdfs":
        return ArrowFS(kind, scheme, parsed.netloc), "/" + key
    if kind == "azure":
        container = parsed.netloc.partition("@")[0]
        if "@" not in parsed.netloc or not container:
            expected = f"{scheme}://<container>@<account>.dfs.core.windows.net/<path>"
            raise CheckpointFSError(location, f"an Azure location names its container and account: {expected}")
        return ArrowFS(kind, scheme, parsed.netloc), "/".join(p for p in (container, key) if p)
    if not parsed.netloc:
        raise CheckpointFSError(location, f"a {scheme}: location names its bucket: {scheme}://<bucket>/<path>")
    return ArrowFS(kind, scheme, parsed.netloc), "/".join(p for p in (parsed.netloc, key) if p)
