"""The client side of the training server (arrepro.train.server): a train job asks a running
server to train its cell (``run_via_server``), starting it first where none runs, or says why
it trains in its own process (``why_not``). The server, its key, its socket and the protocol
between the two are described in arrepro.train.server."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arrepro.config.paths import PACKAGE_ROOT, REPO_ROOT

ENV = "ARREPRO_TRAIN_SERVER"  # 0 (false, no, off): every job trains in its own process
IDLE_ENV = "ARREPRO_TRAIN_SERVER_IDLE"  # seconds an idle server waits before it exits (tests: a few)
IDLE_SECONDS = 120
# a starting server that writes nothing to its log (a line each warm-up step, and every 30 s in which
# it used CPU: server._heartbeat) for this long is given up; one that goes on writing is waited for (a
# fresh clone's first start compiles the fused kernels: minutes, over 10 on a loaded machine)
START_SECONDS = 600
WAIT_REPORT_SECONDS = 60  # a waiting job says so this often
IMPORT_ENV = ("PYTHONPATH", "ARREPRO_CPU_KERNEL_ISA", IDLE_ENV)  # and every NUMBA_* variable
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SERVER_MODULE = f"{__spec__.parent}.server"  # what `python -m` starts: the server beside this module


def server_key() -> str:
    """What a server must share with a job to train its cell: the package's code (every .py file
    under it, and scripts/train_cell.py where it is at hand), the interpreter, and the import-time
    environment."""
    h = hashlib.sha256()
    files = sorted(PACKAGE_ROOT.rglob("*.py")) + [p for p in [REPO_ROOT / "scripts" / "train_cell.py"] if p.exists()]
    for f in files:
        h.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
    env = {k: v for k, v in sorted(os.environ.items()) if k in IMPORT_ENV or k.startswith("NUMBA_")}
    h.update(json.dumps([sys.executable, sys.version, env]).encode())
    return h.hexdigest()[:20]


def _address(key: str) -> str:
    return f"\0arrepro-trainer-{os.getuid()}-{key}"


def _side_file(key: str, ext: str) -> Path:
    return Path(tempfile.gettempdir()) / f"arrepro-trainer-{os.getuid()}-{key}.{ext}"


def why_not(spec_json: str) -> str | None:
    """Why this job trains in its own process rather than through a server (None: it may use one)."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV}={os.environ[ENV]}"
    if not sys.platform.startswith("linux"):
        return "not Linux (the server's socket is in Linux's abstract namespace)"
    if os.environ.get("SLURM_JOB_ID"):
        return "inside a Slurm job (a server would end with the job)"
    try:
        device = json.loads(spec_json).get("device", "cpu")
    except (ValueError, AttributeError):
        return "the cell spec is not a JSON object (the trainer reports it)"
    return None if device == "cpu" else f"device {device!r}: the server trains CPU cells"


# ------------------------------------------------------------------------------------- the client
def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    """One message: a line of JSON (with ``fds`` passed along, SCM_RIGHTS)."""
    socket.send_fds(sock, [json.dumps(message).encode() + b"\n"], list(fds))


def _recv_request(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """A client's request (one line of JSON) and the two file descriptors it came with."""
    data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
    while data and not data.endswith(b"\n"):
        more = sock.recv(1 << 16)
        if not more:
            return None, fds
        data += more
    return (json.loads(data) if data else None), fds


def _connect(key: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(_address(key))
        return s
    except OSError:
        s.close()
        return None


def _alive(pid: int, key: str) -> bool:
    """Whether process ``pid`` runs (not a zombie) and is a server of ``key`` (its command line
    names it: a pid used again by another process is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return key.encode() in cmdline.split(b"\0") and state not in ("Z", "X")


def _starting(key: str) -> int | None:
    """The pid of a server of ``key`` that a job started and that still runs (it is warming up:
    it does not answer yet), from the note its starter wrote; None."""
    try:
        pid = int(_side_file(key, "starting").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid, key) else None


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _start(key: str, log) -> socket.socket | None:
    """The server's connection: the one that answers, else the one that is starting (a job of this
    code started it: the job waits for it, saying so, and never starts a second one), else one this
    job starts (under a lock: one start) and waits for. While it warms up its log grows (a line a
    step); a server that exits, or writes nothing to its log for ``START_SECONDS``, is given up: None,
    with the reason in the job's log (the job then trains in its own process)."""
    sock = _connect(key)
    if sock is not None:
        return sock
    server_log = _side_file(key, "log")
    with open(_side_file(key, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(key)
        if sock is not None:
            return sock
        failed = _side_file(key, "failed")
        if failed.exists():  # this code's server failed its warm-up: no job pays for another try
            log(f"no training server: its warm-up failed with this code ({failed.read_text().strip()}; see "
                f"{server_log}): training in this process")
            return None
        pid, proc = _starting(key), None
        if pid is None:
            with open(server_log, "a") as out:
                os.utime(out.fileno())  # (an older server's log, not written since, would read as a stalled start)
                proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, key], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            pid = proc.pid
            _side_file(key, "starting").write_text(f"{pid}\n")
            log(f"started a training server (pid {pid}; its log: {server_log}); it warms up (compiles and checks "
                "the fused CPU kernels, steps a small model of every mixer) before it answers")
        else:
            log(f"the training server of this code (pid {pid}) is warming up: waiting for it (its log: {server_log}: "
                f"{_last_line(server_log)!r})")
    return _wait(key, pid, proc, server_log, log)


def _wait(key: str, pid: int, proc, server_log: Path, log) -> socket.socket | None:
    """The connection of the starting server ``pid`` (``proc``: this job's child), once it answers;
    None (said in the log) once it has exited, or written nothing to its log for ``START_SECONDS``."""
    since = time.monotonic()
    said = since
    while True:
        sock = _connect(key)
        if sock is not None:
            return sock
        if not (proc.poll() is None if proc is not None else _alive(pid, key)):
            sock = _connect(key)
            if sock is not None:
                return sock
            failed = _side_file(key, "failed")
            why = f": {failed.read_text().strip()}" if failed.exists() else ""
            log(f"the training server (pid {pid}) exited before it answered{why} (see {server_log}): "
                "training in this process")
            return None
        try:
            quiet = time.time() - server_log.stat().st_mtime
        except OSError:
            quiet = time.monotonic() - since
        if quiet > START_SECONDS:
            log(f"the training server (pid {pid}) is still warming up but has written nothing to its log for "
                f"{quiet:.0f} s (more than {START_SECONDS} s; see {server_log}): training in this process")
            return None
        if time.monotonic() - said >= WAIT_REPORT_SECONDS:
            said = time.monotonic()
            log(f"still waiting for the training server (pid {pid}), warming up for {said - since:.0f} s: "
                f"{_last_line(server_log)!r}")
        time.sleep(0.05)


def run_via_server(argv: list[str], log) -> int | None:
    """Train the cell of ``argv`` (train_cell.py's arguments) in a child of the server: its exit
    status, or None where no server could be had or none started the cell (the caller then trains
    in its own process); every reason in the job's log. A server that closes the connection before
    it has started the cell (one that exits, idle, as the job connects) is asked once more."""
    key = server_key()
    for attempt in (1, 2):
        try:
            sock = _start(key, log)
        except OSError as e:
            log(f"no training server ({e}): training in this process")
            return None
        if sock is None:
            return None
        code = _converse(sock, argv, key, log)
        if code is not None:
            return code
        log("the training server closed the connection before it started the cell (see "
            f"{_side_file(key, 'log')}): " + ("asking again" if attempt == 1 else "training in this process"))
    return None


def _error(message: str, log) -> int:
    """``message`` (an error) in the job's logs and on standard error: exit status 1."""
    log(message)
    print(message, file=sys.stderr, flush=True)
    return 1


def _converse(sock: socket.socket, argv: list[str], key: str, log) -> int | None:
    """The request on ``sock``, then the server's replies: the cell's exit status; None where the
    connection ended before the server started the cell's process (nothing of the cell ran)."""
    child = {"pid": None, "pending": None}

    def forward(signum, _frame):
        if child["pid"] is None:
            child["pending"] = signum  # sent once the child's pid is known
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child["pid"], signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        with sock, sock.makefile("rb") as replies:
            _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, [1, 2])
            for line in replies:
                message = json.loads(line)
                if "pid" in message:
                    child["pid"] = message["pid"]
                    if child["pending"] is not None:
                        forward(child["pending"], None)
                if "exit" in message:
                    return _ended(int(message["exit"]), child["pid"], message.get("cpu_seconds", float("nan")), log)
        lost = "closed the connection"
    except (OSError, ValueError) as e:  # a reset connection, a garbled reply
        lost = f"failed ({type(e).__name__}: {e})"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if child["pid"] is None:
        return None
    return _error(f"train_cell.py: error: the training server {lost} before the cell ended (its process, pid "
                  f"{child['pid']}, may still run; see {_side_file(key, 'log')}): nothing of this attempt is a result",
                  log)


def _ended(code: int, pid: int | None, cpu_seconds: float, log) -> int:
    """The job's exit status for its child's (the server's ``os.waitstatus_to_exitcode``: -N for a
    child killed by signal N), said in the logs: the CPU time it used, and a signal that killed it
    as an error naming the signal (exit status 128 + N, as a shell reports it)."""
    what = f"the cell's process (pid {pid}, a child of the training server)"
    if code >= 0:
        log(f"{what} used {cpu_seconds:.2f} CPU-seconds")
        return code
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown signal"
    _error(f"train_cell.py: error: {what} was killed by signal {-code} ({name}) after {cpu_seconds:.2f} "
           "CPU-seconds, before the cell ended: nothing of this attempt is a result (a rerun resumes from the "
           "cell's last checkpoint)", log)
    return 128 - code
