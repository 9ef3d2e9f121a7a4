"""Private Kafka, Redis and PostgreSQL for the fault tests, which kill and restart them.

The shared services (`scripts/services up`, the HELIX_* variables) serve every other test at the
same time, so the fault tests never touch them: each service here is started from the machine's
own binaries on free loopback ports, under a temporary directory, as a child process this module
owns (Kafka from the jars `scripts/services` cached in `$HELIX_SERVICES_HOME`, default
`~/.cache/helix-es`; nothing is downloaded). `kill()` is SIGKILL to that process only.

Each runs under `setpriv --pdeathsig KILL`, so it dies with the test process even when that is
killed without running its teardown (a CI timeout). The parent-death signal follows the thread
that started the process: start them from the main thread (the event loop's), never from
`asyncio.to_thread`; wait for them to be ready there instead (`wait_ready`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

HOST = "127.0.0.1"


class ServiceError(RuntimeError):
    """A private service could not be started."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _wait(
    ready: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[bytes] | None, log: Path
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited with {proc.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise ServiceError(f"{what} not ready after {timeout}s:\n{_tail(log)}")
        time.sleep(0.1)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def _kill(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGKILL) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(60)


def _spawn(cmd: list[str], log: Path, *, user: str | None = None) -> subprocess.Popen[bytes]:
    """Start `cmd` (as `user`, when root) so that it is SIGKILLed if this process dies first."""
    if shutil.which("setpriv"):
        who = ["--reuid", user, "--regid", user, "--init-groups"] if user else []
        cmd = ["setpriv", *who, "--pdeathsig", "KILL", "--", *cmd]
    elif user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def kafka_libs() -> Path | None:
    home = Path(os.environ.get("HELIX_SERVICES_HOME") or Path.home() / ".cache" / "helix-es")
    version = os.environ.get("HELIX_KAFKA_VERSION", "3.9.1")
    libs = home / f"kafka-{version}" / "libs"
    return libs if (libs / ".complete").exists() and shutil.which("java") else None


class Kafka:
    """A single KRaft node (broker + controller); its data survives `kill` and `start`."""

    def __init__(self, root: Path, libs: Path) -> None:
        self.root, self.libs = root, libs
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"{HOST}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "kafka.log"
        self.config = root / "server.properties"
        data = root / "data"
        self.config.write_text(f"""
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{self.controller_port}
listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{self.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
broker.session.timeout.ms=2000
broker.heartbeat.interval.ms=500
num.network.threads=2
num.io.threads=2
""")
        (root / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        # A KRaft cluster id is a random UUID in URL-safe base64: no JVM start to make one.
        # One that starts with "-" would read as an option (1 in 64): draw again.
        cluster = "-"
        while cluster.startswith("-"):
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._java(["kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(self.config)], wait=True)

    def _java(self, args: list[str], *, wait: bool = False, heap: str = "") -> subprocess.Popen[bytes]:
        cmd = [
            "java",
            *heap.split(),
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.root / 'log4j.properties'}",
            "-cp",
            f"{self.libs}/*",
            *args,
        ]
        proc = _spawn(cmd, self.log)
        if wait and proc.wait(120) != 0:
            raise ServiceError(f"{' '.join(args[:2])} failed:\n{_tail(self.log)}")
        return proc

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        self.proc = self._java(["kafka.Kafka", str(self.config)], heap="-Xmx384m -Xms128m")

    def wait_ready(self, timeout: float = 120) -> None:
        _wait(self.ready, timeout, "private Kafka", self.proc, self.log)

    def ready(self) -> bool:
        """The broker answers a Metadata request listing itself (not merely an open port)."""
        if not _answers(self.port):
            return False
        try:
            with socket.create_connection((HOST, self.port), timeout=3) as s:
                s.settimeout(3)
                cid = b"helix-faults"
                # Metadata v4, correlation id 7: all topics, no auto-creation.
                msg = b"\x00\x03\x00\x04\x00\x00\x00\x07" + len(cid).to_bytes(2, "big") + cid + b"\xff\xff\xff\xff\x00"
                s.sendall(len(msg).to_bytes(4, "big") + msg)
                head = b""
                while len(head) < 16:
                    chunk = s.recv(16 - len(head))
                    if not chunk:
                        return False
                    head += chunk
                # size, correlation id, throttle ms, broker count
                return int.from_bytes(head[4:8], "big") == 7 and int.from_bytes(head[12:16], "big") >= 1
        except OSError:
            return False

    def kill(self) -> None:
        _kill(self.proc)

    def stop(self) -> None:
        self.kill()


class Redis:
    """redis-server without persistence: `kill` and `start` give an empty server, as FLUSHALL does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.log = root / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.root),
            "--logfile",
            str(self.log),
        ]
        self.proc = _spawn(cmd, self.root / "redis.out")
        _wait(lambda: _answers(self.port), timeout, "private Redis", self.proc, self.log)

    def kill(self) -> None:
        _kill(self.proc)

    def stop(self) -> None:
        self.kill()


def pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


class Postgres:
    """A throw-away cluster (trust auth on loopback, superuser `helix`); `restart` is a crash and recovery."""

    def __init__(self, bindir: Path) -> None:
        self.bin = bindir
        self.port = free_port()
        self.dsn = f"postgresql://helix@{HOST}:{self.port}/postgres"
        # As root the server runs as `postgres`, which cannot enter pytest's 0700 temp dirs.
        self.root = Path(tempfile.mkdtemp(prefix="helix-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        self.proc: subprocess.Popen[bytes] | None = None
        if self.user:
            shutil.chown(self.root, self.user)
        cmd = [
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "helix",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        if _spawn(cmd, self.log, user=self.user).wait(120) != 0:
            raise ServiceError(f"initdb failed:\n{_tail(self.log)}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '{HOST}'\nunix_socket_directories = ''\n"
                "fsync = off\nshared_buffers = 32MB\nmax_connections = 50\n"
            )

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """The postmaster itself, no pg_ctl: it is this process's child."""
        self.proc = _spawn([str(self.bin / "postgres"), "-D", str(self.data)], self.log, user=self.user)

    def ready(self) -> bool:
        probe = [str(self.bin / "pg_isready"), "-q", "-h", HOST, "-p", str(self.port), "-t", "2"]
        return subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True).returncode == 0

    def wait_ready(self, timeout: float = 60) -> None:
        _wait(self.ready, timeout, "private PostgreSQL", self.proc, self.log)

    def crash(self) -> None:
        """Immediate shutdown (SIGQUIT, as `pg_ctl -m immediate`): connections cut, no checkpoint."""
        _kill(self.proc, signal.SIGQUIT)

    def restart(self) -> None:
        """A crash, then a start that recovers from the WAL."""
        self.crash()
        self.start()

    def stop(self) -> None:
        _kill(self.proc, signal.SIGQUIT)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def started(libs: Path, pg_bin: Path) -> Iterator[tuple[Kafka, Redis, Postgres]]:
    """A private Kafka, Redis and PostgreSQL, ready; stopped (and their files removed) afterwards."""
    root = Path(tempfile.mkdtemp(prefix="helix-faults-"))
    services: list[Kafka | Redis | Postgres] = []
    try:
        kafka = Kafka(root, libs)
        services.append(kafka)
        redis = Redis(root)
        services.append(redis)
        postgres = Postgres(pg_bin)
        services.append(postgres)
        kafka.launch()  # the slowest: it boots while the others start
        redis.start()
        postgres.start()
        kafka.wait_ready()
        yield kafka, redis, postgres
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(root, ignore_errors=True)
