"""One start-up for many CPU cells: a training server that forks a fresh process per cell.

A CPU cell used to pay for its own start: Python, torch's import, numba loading the fused CPU
kernels and each kernel's self-check, 3-4 CPU-seconds of a demo cell's 15-30. The train rule's
jobs (``train_cell.py --server``) instead ask a server that has done all that once: it forks a
child per cell, and the child trains the cell exactly as ``train_cell.py`` would in its own
process (``arrepro.train.job.train_here``: the same code, from the same state: nothing trains in the
server, so every child starts from the state it had after its start-up; every seed is set by
the cell). Each job is still one cell: Snakemake's outputs, rerun decisions, logs and
checkpoints per cell are what they were.

The job's process (the client) stays for the whole run: it hands the server its standard output
and error (the child writes ``job.log`` itself, through them), forwards SIGTERM, SIGINT and
SIGHUP to the child (which checkpoints and exits 3 as ever), and exits with the child's status.
If the client dies (``kill -9``), the server sees its connection close and sends the child
SIGTERM; ``--die-with-parent`` still applies to the client, so Snakemake's death reaches the child.

Where: a Unix socket in Linux's abstract namespace (no file; per machine, so never shared by
nodes over a network file system), named by the user id and ``server_key``: a digest of the
package's source files, the interpreter, and the environment variables read at import time
(NUMBA_*, ARREPRO_CPU_KERNEL_ISA, PYTHONPATH). Edited code or another environment gets another
server; an idle one exits after ``IDLE_SECONDS``. Only the same user may connect (SO_PEERCRED).
The first client starts the server (``python -m arrepro.train.server``, its log in the temporary
directory) under a lock, notes its pid beside the log, and waits for it; a job that comes while
it warms up (which compiles every kernel: over 10 minutes on a loaded machine) finds the note,
says in its log that it waits for that server, and never starts a second one; the server's log
gets a line per warm-up step, and the waiting jobs say every minute how far it is. A server that
exits before it answers, or writes nothing to its log for ``client.START_SECONDS``, is given up:
the job trains in its own process, saying why. A connection that the server closes before it has
started the cell (an idle server exiting as the job connects) is asked once more; one lost after,
an error in the job's own log. No server where it cannot work or would not help:
not on Linux, inside a Slurm job (its processes end with the job), ``ARREPRO_TRAIN_SERVER=0``, a
cell that is not on the CPU; a server that cannot be had: the job trains in its own process and
its log says why.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import sys
import time

from arrepro.config.paths import REPO_ROOT


from arrepro.train.client import FORWARDED, IDLE_ENV, IDLE_SECONDS, _address, _recv_request, _send, _side_file


# ------------------------------------------------------------------------------------- the server
_step = ["starting"]  # the warm-up step under way (``_say``), for the heartbeat
HEARTBEAT_SECONDS = 30


def _say(line: str) -> None:
    _step[0] = line
    print(f"warm-up: {line}", flush=True)


@contextlib.contextmanager
def _heartbeat(every: float = HEARTBEAT_SECONDS):
    """While the warm-up runs, a line in the log every ``every`` seconds in which it used CPU (2% of a
    core or more: a step
    that compiles for minutes on a loaded machine still shows progress; a hung one goes quiet, and
    the jobs waiting for it give up: arrepro.train.client). The thread has ended when this returns
    (the server forks its children later)."""
    import threading

    done = threading.Event()

    def beat():
        last = sum(os.times()[:2])
        while not done.wait(every):
            now = sum(os.times()[:2])
            if now - last > max(0.02 * every, 0.02):  # (2% of a core at least: more than this thread's own ticks)
                print(f"warm-up: still at {_step[0]} ({now:.0f} CPU-seconds so far)", flush=True)
            last = now

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _warm_up(say=_say) -> None:
    """What a child would otherwise do first: pin the numerics, import torch and the trainer,
    compile (or load) and self-check every fused CPU kernel in fp32, and take one training step
    and one evaluation of a small model of every mixer (its lazy imports, AdamW's among them, and
    the kernels' compiled variants for the layouts training hands them); digest the sources a
    checkpoint's fingerprint reads. Nothing here touches a child's numbers: each cell seeds what it
    draws. A step that fails is an error of the server (its log names the mixer and the step; the
    server exits before it listens, and the jobs of this code train in their own processes, saying
    why, without starting another): a warm-up that skips a step quietly would hide code that no
    longer runs. Each step is said first (``say``: a line in the server's log), so that the jobs
    waiting for the server see it progress."""
    from arrepro.train import numerics

    numerics.pin_environment()
    import torch

    from arrepro.config.catalogue import data_sources, train_sources
    from arrepro.digest import source_digest
    from arrepro.models import LanguageModel, kernels
    from arrepro.models.registry import available_mixers
    from arrepro.train import loop, prepare

    numerics.settle()
    say("the fused CPU kernels: compiled (or loaded) and checked")
    for name, k in kernels.KERNELS.items():
        if k.device == "cpu":
            kernels._cpu_kernel(name, torch.float32)
            say(f"kernel {name}")
    repo = REPO_ROOT  # as arrepro.train.prepare's fingerprint reads the sources (memoised)
    source_digest(data_sources(repo), repo)
    cpu = torch.device("cpu")
    mixers = available_mixers()
    for i, mixer in enumerate(mixers, 1):
        say(f"a training step and an evaluation of {mixer} ({i} of {len(mixers)})")
        step = "its sources' digest"
        try:
            for mlp in (True, False):
                source_digest(train_sources(mixer, repo, mlp=mlp), repo)
            model = LanguageModel(vocab_size=16, d_model=16, n_layers=2, max_len=8, mixer=mixer)
            compiled = [b for b in model.layers if b.fused is not None]
            # a block compiled whole (backbone.Block) trains here; the mixer's other models (whose
            # options rule that block out) run the block's modules and their own kernels: warm both
            for modules in (False, True)[:1 + bool(compiled)]:
                if modules:
                    for b in compiled:
                        b.fused = None
                path = " with the blocks' modules" if modules else ""
                step = "a training step" + path
                opt = model.configure_optimizer(lr=1e-3, weight_decay=0.1, fused=True)
                x = torch.randint(0, 16, (2, 8))
                loss, _, _ = model.loss(x, x)
                loss.backward()
                opt.step()
                step = "an evaluation" + path
                loop.evaluate(model, x, x, 2, cpu, prepare.autocast_for("fp32", cpu))
        except Exception as e:
            raise WarmUpFailed(f"warm-up of {mixer}, {step}: {type(e).__name__}: {e}") from e


class WarmUpFailed(RuntimeError):
    """A warm-up step that raised: the server does not start (its log says which step)."""


def _child(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int], others: list) -> None:
    """In the forked child: the client's standard output and error, directory and environment,
    then the cell as train_cell.py trains it. Never returns."""
    code = 1
    try:
        for s in [listener, conn, *others]:
            s.close()
        for target, fd in zip((1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from arrepro.train import numerics
        from arrepro.train.job import train_here

        # the pins, as in the server (whose libraries read them); what this job asked for is its own
        numerics.pin_environment(job_env=request["env"])
        sys.argv = ["train_cell.py", *request["argv"]]
        code = train_here(request["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - a child must never return into the server's loop
        import traceback

        for out in (sys.stdout, sys.stderr):  # the job's log (its standard output) and its standard error
            with contextlib.suppress(Exception):
                print("train_cell.py: error: the training server's process for this cell failed before it trained:",
                      file=out)
                traceback.print_exc(file=out)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(key: str) -> None:
    """Warm up, listen, fork a child per request, tell each client its child's pid and exit
    status; SIGTERM a child whose client has gone; exit when idle for ``IDLE_SECONDS`` (or
    ``ARREPRO_TRAIN_SERVER_IDLE``)."""
    with _heartbeat():
        _warm_up()
    idle = float(os.environ.get(IDLE_ENV) or IDLE_SECONDS)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(key))
    listener.listen(64)
    print(f"training server {key} pid {os.getpid()} listening", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    idle_since = time.monotonic()
    while children or time.monotonic() - idle_since < idle:
        for skey, _ in sel.select(timeout=0.2):
            if skey.fileobj is listener:
                conn, _ = listener.accept()
                pid = _accept(conn, listener, list(children.values()))
                if pid is None:
                    conn.close()
                    continue
                children[pid] = conn
                sel.register(conn, selectors.EVENT_READ, pid)
            else:  # a client wrote, or hung up: its cell stops (SIGTERM: checkpoint and exit)
                pid = skey.data
                with contextlib.suppress(OSError):
                    if skey.fileobj.recv(1):
                        continue
                sel.unregister(skey.fileobj)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        while children:
            try:
                pid, status, usage = os.wait3(os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status), "cpu_seconds": usage.ru_utime + usage.ru_stime})
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(conn)
                conn.close()
            idle_since = time.monotonic()
    print(f"training server {key}: idle for {idle:g} s, exiting", flush=True)


def _accept(conn: socket.socket, listener: socket.socket, others: list) -> int | None:
    """Check the caller (the same user), read its request, fork its child; the child's pid."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", creds)[1] != os.getuid():
        return None
    try:
        request, fds = _recv_request(conn)
    except (OSError, ValueError):
        return None
    if request is None or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        _child(conn, listener, request, fds, others)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        _send(conn, {"pid": pid})
    return pid


if __name__ == "__main__":  # pragma: no cover - started by run_via_server
    try:
        serve(sys.argv[1])
    except WarmUpFailed as failed:  # said to the next jobs of this code, which then start no server
        _side_file(sys.argv[1], "failed").write_text(f"{failed}\n")
        raise
