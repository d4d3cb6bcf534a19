"""A Spark standalone cluster on this machine that shares nothing with the Airflow side.

The master and each worker run from a bare Python (the system's ``python3.X`` in a virtualenv that
holds pyspark and its py4j, nothing else) and in a mount namespace of their own, in which ``/work``,
``/root``, ``/home`` and ``/tmp`` are empty: the project's checkout, the Airflow virtualenv and the
interpreter it was made from do not exist there. Each worker also runs in a network namespace of its
own, joined to this machine by a veth pair on a bridge: the workers reach the master, the driver and
the object store only through the bridge's address, as hosts on a network do. Needs root (``ip netns``,
``unshare --mount``).

Every name (namespaces, links) carries this process's id, so that resources a crashed run left behind
are recognised and removed by the next run, and two runs never meet.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PREFIX = "dmc"
#: the system interpreter the cluster's machines run (not this virtualenv's, not its base)
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
#: what the cluster's machines see of this machine's file system (the rest is hidden)
HIDDEN = ("/work", "/root", "/home", "/tmp")


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def bare_python(folder: Path, extra: tuple[str, ...] = ()) -> Path:
    """A virtualenv of the system's Python holding only pyspark and py4j (copied from this install), and the
    ``extra`` packages (a Spark Connect server's Python workers need pyarrow and numpy)."""
    import importlib

    venv = folder / "bare-python"
    if (venv / ".complete").exists():
        return venv
    if venv.exists():
        shutil.rmtree(venv)
    run(str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv))
    site = _site_packages(venv)
    packages = [Path(importlib.import_module(name).__file__ or "").parent for name in ("pyspark", "py4j", *extra)]
    for libs in [p.parent / f"{p.name}.libs" for p in packages]:  # wheels' vendored shared libraries
        if libs.is_dir():
            packages.append(libs)
    for package in packages:
        # hard links where the file system allows (the files are read-only to the cluster), else copies
        if run("cp", "-al", str(package), str(site / package.name), check=False).returncode != 0:
            shutil.rmtree(site / package.name, ignore_errors=True)
            shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    for dist in packages[0].parent.glob("*.dist-info"):
        if dist.name.startswith(tuple(f"{name}-" for name in ("pyspark", "py4j", *extra))):
            shutil.copytree(dist, site / dist.name, dirs_exist_ok=True)
    (venv / ".complete").write_text("")
    return venv


def cleanup_stale() -> None:
    """Remove namespaces and links of earlier runs whose process is gone."""
    for name in run("ip", "netns", "list", check=False).stdout.split():
        match = re.fullmatch(rf"{PREFIX}([0-9a-f]+)w\d+", name)
        if match and not psutil.pid_exists(int(match.group(1), 16)):
            run("ip", "netns", "delete", name, check=False)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        match = re.search(rf": ({PREFIX}([0-9a-f]+)[bh]\d*)[@:]", line)
        if match and not psutil.pid_exists(int(match.group(2), 16)):
            run("ip", "link", "delete", match.group(1), check=False)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _free_subnet() -> str:
    used = run("ip", "-o", "-4", "addr", "show").stdout + run("ip", "-4", "route", "show").stdout
    for third in range((os.getpid() % 200) + 20, 255):
        prefix = f"10.213.{third}"
        if f"{prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.213.x.0/24 subnet")


@dataclass
class Node:
    """A master or worker process in its namespaces."""

    name: str
    address: str
    folder: Path
    proc: subprocess.Popen
    netns: str | None = None

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def executors(self) -> list[psutil.Process]:
        """The executor JVMs this worker launched (alive)."""
        out = []
        for p in self.tree():
            try:
                if any("CoarseGrainedExecutorBackend" in part for part in p.cmdline()):
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def log_text(self) -> str:
        """Everything the node and its executors wrote (logs, executors' stdout and stderr)."""
        texts = []
        for f in sorted(self.folder.rglob("*")):
            if f.is_file() and (f.suffix in (".log", ".out") or f.name in ("stdout", "stderr")):
                texts.append(f.read_text(errors="replace"))
        return "\n".join(texts)


@dataclass
class NamespacedCluster:
    host: str
    port: int
    ui_port: int
    master: Node
    workers: list[Node]
    bridge: str
    subnet: str
    folder: Path
    extra_links: list[str] = field(default_factory=list)
    #: the Spark Connect server (``start_cluster(connect=True)``) and its port
    connect: Node | None = None
    connect_port: int = 0

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def wait_idle(self, timeout: float = 180) -> None:
        """Wait until every worker is alive with all its cores free and no application runs, so that the next
        application gets an executor on each worker (executors of a finished or killed run take a moment to go)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            workers = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            if (len(workers) == len(self.workers) and all(w.get("coresused", 0) == 0 for w in workers)
                    and not state.get("activeapps")):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not become idle: {json.dumps(state)[:2000]}")
            time.sleep(0.5)

    def run_like(self, node: Node, argv: list[str]) -> subprocess.CompletedProcess:
        """Run ``argv`` as ``node`` runs: its network namespace, a mount namespace that hides the same
        folders, the bare Python and the node's folder under /srv, an empty environment."""
        env = {"PATH": "/srv/python/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/srv/node", "LANG": "C.UTF-8"}
        script = _node_script(self.folder / "bare-python", node.folder, env, argv)
        prefix = ["ip", "netns", "exec", node.netns] if node.netns else []
        return subprocess.run([*prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, timeout=120)

    def stop(self) -> None:
        for node in [*([self.connect] if self.connect else []), *self.workers, self.master]:
            _stop(node.proc)
        for node in self.workers:
            if node.netns:
                run("ip", "netns", "delete", node.netns, check=False)
        run("ip", "link", "delete", self.bridge, check=False)


def _stop(proc: subprocess.Popen) -> None:
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=20)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)


def _node_script(python: Path, node: Path, env: dict[str, str], argv: list[str]) -> str:
    """A shell script for ``unshare --mount``: the node sees the bare Python and its own folder under /srv,
    and nothing of /work, /root, /home or /tmp."""
    exports = " ".join(f"{k}={_q(v)}" for k, v in env.items())
    hide = "\n".join(f"mount -t tmpfs -o size={'1g' if d == '/tmp' else '16m'},mode=1777 tmpfs {d}"
                     for d in HIDDEN if os.path.isdir(d))
    return f"""set -e
mount --make-rprivate /
mount -t tmpfs -o size=1m tmpfs /srv
mkdir /srv/python /srv/node
mount --bind {_q(str(python))} /srv/python
mount -o remount,bind,ro /srv/python
mount --bind {_q(str(node))} /srv/node
{hide}
cd /srv/node
exec env -i {exports} {" ".join(_q(a) for a in argv)}
"""


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def start_cluster(folder: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                  timeout: float = 180.0, connect: bool = False) -> NamespacedCluster:
    """Start the master (this machine's network, its own mount namespace) and ``workers`` workers (a
    network and a mount namespace each). Stop it with :meth:`NamespacedCluster.stop`.

    With ``connect``, a Spark Connect server runs too, as the master does (this machine's network, its
    own mount namespace), with the cluster as its master; the machines' Python then has pyarrow and
    numpy beside pyspark, as a Spark Connect server's Python workers need. Its port: ``connect_port``."""
    if os.geteuid() != 0:
        raise RuntimeError("the namespaced cluster needs root (ip netns, unshare --mount)")
    if not SYSTEM_PYTHON.exists():
        raise RuntimeError(f"the namespaced cluster runs the system's {SYSTEM_PYTHON.name}, which is not installed")
    cleanup_stale()
    tag = f"{PREFIX}{os.getpid():x}"
    python = bare_python(folder, ("pyarrow", "numpy") if connect else ())
    subnet = _free_subnet()
    host = f"{subnet}.1"
    bridge = f"{tag}b"
    run("ip", "link", "add", bridge, "type", "bridge")
    nodes: list[Node] = []
    cluster = None
    try:
        run("ip", "addr", "add", f"{host}/24", "dev", bridge)
        run("ip", "link", "set", bridge, "up")
        spark_home = f"/srv/python/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/pyspark"
        spark_class = f"{spark_home}/bin/spark-class"
        java_home = str(Path(os.path.realpath(shutil.which("java") or "/usr/bin/java")).parent.parent)

        def node_env(address: str) -> dict[str, str]:
            return {"PATH": "/srv/python/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/srv/node",
                    "JAVA_HOME": java_home, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": address,
                    "SPARK_LOG_DIR": "/srv/node/logs", "SPARK_WORKER_DIR": "/srv/node/work",
                    "SPARK_LOCAL_DIRS": "/srv/node/local", "SPARK_NO_DAEMONIZE": "1", "LANG": "C.UTF-8"}

        def launch(name: str, address: str, argv: list[str], netns: str | None) -> Node:
            node_dir = folder / name
            shutil.rmtree(node_dir, ignore_errors=True)
            for sub in ("logs", "work", "local"):
                (node_dir / sub).mkdir(parents=True)
            script = _node_script(python, node_dir, node_env(address), argv)
            prefix = ["ip", "netns", "exec", netns] if netns else []
            out = open(node_dir / f"{name}.out", "w")
            proc = subprocess.Popen([*prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            out.close()
            node = Node(name, address, node_dir, proc, netns)
            nodes.append(node)
            return node

        port, ui_port = free_port(host), free_port(host)
        master = launch("master", host, [spark_class, "org.apache.spark.deploy.master.Master", "--host", host,
                                         "--port", str(port), "--webui-port", str(ui_port)], None)
        worker_nodes = []
        for i in range(1, workers + 1):
            netns = f"{tag}w{i}"
            address = f"{subnet}.{i + 1}"
            outside, inside = f"{tag}h{i}", f"{tag}p{i}"
            run("ip", "netns", "add", netns)
            run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            run("ip", "link", "set", inside, "netns", netns)
            run("ip", "link", "set", outside, "master", bridge, "up")
            for cmd in (["ip", "addr", "add", f"{address}/24", "dev", inside], ["ip", "link", "set", inside, "up"],
                        ["ip", "link", "set", "lo", "up"], ["ip", "route", "add", "default", "via", host]):
                run("ip", "netns", "exec", netns, *cmd)
            worker_nodes.append(launch(f"worker{i}", address, [
                spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://{host}:{port}", "--host", address,
                "--cores", str(cores), "--memory", memory, "--webui-port", "8081"], netns))
        cluster = NamespacedCluster(host, port, ui_port, master, worker_nodes, bridge, subnet, folder)
        if connect:
            cluster.connect_port = free_port(host)
            cluster.connect = launch("connect", host, [
                f"{spark_home}/bin/spark-submit", "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", cluster.url, "--conf", f"spark.connect.grpc.binding.address={host}",
                "--conf", f"spark.connect.grpc.binding.port={cluster.connect_port}",
                "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
                "--conf", "spark.eventLog.enabled=true", "--conf", "spark.eventLog.dir=/srv/node/logs",
                "--conf", "spark.pyspark.python=/srv/python/bin/python", "--executor-memory", "512m"], None)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if cluster.state().get("aliveworkers", 0) >= workers:
                    break
            except (OSError, ValueError):  # not up yet; a UI still starting may answer with its HTML page
                pass
            dead = [n.name for n in nodes if n.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not come up (exited: {dead}):\n" +
                                   "\n".join(n.log_text()[-2000:] for n in nodes))
            time.sleep(0.5)
        while cluster.connect is not None and "Spark Connect server started" not in cluster.connect.log_text():
            dead = [n.name for n in nodes if n.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not come up (exited: {dead}):\n" +
                                   "\n".join(n.log_text()[-2000:] for n in nodes))
            time.sleep(0.5)
        return cluster
    except BaseException:
        if cluster is not None:
            cluster.stop()
        else:
            for node in nodes:
                _stop(node.proc)
            for i in range(1, workers + 1):
                run("ip", "netns", "delete", f"{tag}w{i}", check=False)
            run("ip", "link", "delete", bridge, check=False)
        raise
