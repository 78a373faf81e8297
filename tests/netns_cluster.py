"""Several hosts on one machine: Linux network namespaces joined by veth pairs to one bridge, each with its own
address, and a Spark standalone master and workers started inside them. Created and removed by the test that
uses them (root only; `unavailable_reason` says why not elsewhere). Holds no tests of its own."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_PORT = 7077


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here (None: they can): not root, no `ip`, or the kernel refuses."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"ssprobe{uuid.uuid4().hex[:6]}"
    created = _ip("netns", "add", probe, check=False)
    if created.returncode != 0:
        return f"`ip netns add` failed: {created.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that no interface of this machine uses."""
    used = _ip("-o", "-4", "addr").stdout + _ip("-o", "-4", "route").stdout
    for third in range(1, 255):
        net = ipaddress.ip_network(f"10.213.{third}.0/24")
        if f"10.213.{third}." not in used:
            return net
    raise RuntimeError("no free /24 in 10.213.0.0/16 for the test hosts")


@dataclass
class Host:
    """A network namespace with one address on the bridge: one machine of the test cluster."""

    name: str
    namespace: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class NetnsHosts:
    """Hosts on a private bridge; processes started on them are killed and the namespaces removed by `close`."""

    root: Path
    names: tuple[str, ...]
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"ssbr{self.tag}"

    def create(self) -> None:
        """Make the bridge and, per name, a namespace with a veth pair onto it and the next free address."""
        subnet = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for index, name in enumerate(self.names):
            namespace, veth = f"ss{self.tag}-{name}", f"ss{self.tag}v{index}"
            address = str(subnet.network_address + 10 + index)
            _ip("netns", "add", namespace)
            self.hosts[name] = Host(name, namespace, address)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", namespace, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")

    def start(self, host: str, argv: list[str], log_name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start `argv` on `host` in its own process group (so its children die with it), logging to a file."""
        with open(self.root / f"{log_name}.log", "ab") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                self.hosts[host].command(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.processes.append((log_name, process))
        return process

    def wait_listening(self, host: str, port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
        """Wait until something accepts connections at `host`'s address and `port` (seen from inside `host`)."""
        probe = (
            f"import socket,sys; s=socket.socket(); s.settimeout(1); "
            f"sys.exit(s.connect_ex(({self.hosts[host].address!r}, {port})))"
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the process on {host} exited with {process.returncode} before listening")
            if subprocess.run(self.hosts[host].command([sys.executable, "-c", probe])).returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"nothing listens at {self.hosts[host].address}:{port} on {host} after {timeout}s")

    def close(self) -> None:
        """Kill every process group started here, then remove the namespaces and the bridge."""
        for _, process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        for host in self.hosts.values():
            _ip("netns", "del", host.namespace, check=False)
        _ip("link", "del", self.bridge, check=False)


@dataclass
class StandaloneCluster:
    """A Spark standalone master on one host and a one-core worker on each of the others."""

    hosts: NetnsHosts
    master_host: str
    worker_hosts: tuple[str, ...]

    @property
    def master_url(self) -> str:
        return f"spark://{self.hosts.hosts[self.master_host].address}:{MASTER_PORT}"

    def start(self) -> None:
        """Start the master, then the workers, each bound to its host's address; wait for each to listen."""
        master = self.hosts.hosts[self.master_host]
        process = self.hosts.start(
            self.master_host,
            [
                str(SPARK_CLASS),
                "org.apache.spark.deploy.master.Master",
                "--host",
                master.address,
                "--port",
                str(MASTER_PORT),
                "--webui-port",
                "8080",
            ],
            "master",
            _spark_env(master.address, self.hosts.root / "master"),
        )
        self.hosts.wait_listening(self.master_host, MASTER_PORT, process)
        for name in self.worker_hosts:
            worker = self.hosts.hosts[name]
            home = self.hosts.root / name
            process = self.hosts.start(
                name,
                [
                    str(SPARK_CLASS),
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    worker.address,
                    "--port",
                    "7078",
                    "--webui-port",
                    "8081",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(home / "work"),
                    self.master_url,
                ],
                name,
                _spark_env(worker.address, home),
            )
            self.hosts.wait_listening(name, 7078, process)


def _spark_env(address: str, home: Path) -> dict[str, str]:
    """A Spark daemon's environment on a test host: its address for every endpoint, its own local dirs."""
    (home / "local").mkdir(parents=True, exist_ok=True)
    return {
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": address,
        "SPARK_LOCAL_HOSTNAME": address,
        "SPARK_LOCAL_DIRS": str(home / "local"),
        "SPARK_LOG_DIR": str(home),
        "PYSPARK_PYTHON": sys.executable,
    }
