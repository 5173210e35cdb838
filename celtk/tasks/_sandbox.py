"""Run model-written code in an isolated, limited process, and grade it as lm-eval's ``code_eval`` does.

Isolation, strongest the machine allows (:func:`isolation`):

* ``root-namespaces`` (started as root): new PID, IPC, mount and network namespaces; a fresh
  ``/proc`` that shows only the program's processes; every mount read-only; ``/tmp``, ``/var/tmp``,
  ``/dev/shm``, ``/run/lock``, the user's home and the model caches replaced by private empty
  tmpfs (the interpreter's own install is bound back read-only); the program runs as ``nobody``
  with no capabilities.
* ``user-namespaces`` (not root, unprivileged user namespaces allowed): the same namespaces and
  mounts inside a user namespace; the program keeps the caller's uid (without capabilities), so it
  can still read what the caller can read outside the hidden directories.
* ``weak`` (neither): only limits, a process group and, as root, the ``nobody`` user. Refused
  unless the user opts in (``allow_weak`` / ``CELTK_ALLOW_WEAK_SANDBOX=1``).

Limits: CPU and wall time, address space per process, file size; memory and process count for the
whole program by a cgroup where one can be made (:mod:`._sandbox_cgroup`), else per process plus
``RLIMIT_NPROC``. Cleanup ends the PID namespace (the kernel kills every process in it) or, in
the weak mode, the process group; it never kills by user.

Grading: the program runs under a small runner, as ``exec`` in fresh globals like ``code_eval``;
it passes only if ``exec`` returned normally, i.e. every statement ran, every assertion held and
nothing raised (``SystemExit`` included). The runner then writes a per-run random token to a
private duplicate of its stdout and leaves by ``os._exit`` (no ``atexit`` hooks). Exit status
alone proves nothing: ``sys.exit(0)``, ``os._exit(0)`` or an ``atexit`` hook ends the run without
the token. The token is out of reach of accidents, not of a program that deliberately searches
the runner's memory for it; containing hostile programs is the isolation's job.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from celtk.errors import SandboxRefusedError
from celtk.tasks._sandbox_cgroup import ProgramCgroup, make_cgroup

OPT_IN_ENV = "CELTK_ALLOW_CODE_EXEC"
WEAK_OPT_IN_ENV = "CELTK_ALLOW_WEAK_SANDBOX"

# Runs inside the sandbox as `python -I -S -c RUNNER`; stdin holds "<token>\n<weak 0|1>\n<program>".
_RUNNER = r"""
import os, sys
def _run():
    data = sys.stdin.buffer.read()
    token, weak, source = data.split(b"\n", 2)
    null = os.open(os.devnull, os.O_RDWR)
    channel, errors = os.dup(1), os.dup(2)  # private copies; the program's 0, 1, 2 go to /dev/null
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if weak == b"1":  # no namespaces: keep the program off the network and off other processes
        import socket
        def no_net(*a, **k):
            raise OSError("network access is disabled in the celtk sandbox")
        socket.socket = socket.create_connection = socket.socketpair = no_net
        own_group = os.getpgrp()
        def no_kill(pid, sig, _kill=os.kill, _getpid=os.getpid):
            if pid not in (_getpid(), 0, -own_group):
                raise PermissionError("signalling other processes is disabled in the celtk sandbox")
            return _kill(pid, sig)
        os.kill = no_kill
        os.killpg = lambda group, sig: no_kill(-group if group else 0, sig)
    try:
        exec(compile(source, "program.py", "exec"), {})
    except BaseException:
        import traceback
        os.write(errors, traceback.format_exc()[-2000:].encode(errors="replace"))
        os._exit(1)
    os.write(channel, token)
    os._exit(0)
_run()
"""

# Runs as PID 1 of the new namespaces (root there): make every mount read-only, hide the shared
# and private directories behind empty tmpfs, bind the interpreter's install back, then run the
# runner without capabilities (as `nobody` when we are root). PID 1 stays a shell, so when the
# program ends the kernel ends every process it left.
_LAUNCH = r"""
set -e
uid=$1; python=$2; keep=$3; runner=$4; shift 4
mount --make-rprivate /
while read -r _ _ _ _ point options _; do
  case "$point" in /proc|/proc/*) continue;; esac
  case "$options" in ro|ro,*) continue;; esac
  mount -o remount,bind,ro "$point"
done < /proc/self/mountinfo
for d in "$@"; do
  [ -d "$d" ] || continue
  case "$keep/" in
    "$d"/*) cd "$keep"
            mount -t tmpfs -o size=16m,mode=1777,nosuid,nodev tmpfs "$d"
            mkdir -p "$keep"; mount -c --bind . "$keep"; mount -c -o remount,bind,ro "$keep"; cd /;;
    *) mount -t tmpfs -o size=16m,mode=1777,nosuid,nodev tmpfs "$d";;
  esac
done
work=$(mktemp -d /tmp/celtk-sandbox-XXXXXX)
drop="--inh-caps=-all --bounding-set=-all --no-new-privs"
if [ "$uid" != - ]; then chown "$uid" "$work"; drop="--reuid=$uid --regid=$uid --clear-groups $drop"; fi
cd "$work"
export HOME="$work" TMPDIR="$work"
setpriv $drop "$python" -I -S -c "$runner"
"""

_NAMESPACES = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--mount", "--net"]


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    returncode: int | None
    timed_out: bool
    stderr_tail: str
    isolation: str = ""
    memory_exceeded: bool = False


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_bytes: int = 1 << 30  # the whole program with its children where a cgroup can be made
    max_processes: int = 64
    max_file_bytes: int = 1 << 20


def code_execution_allowed(flag: bool = False) -> bool:
    return flag or os.environ.get(OPT_IN_ENV, "") == "1"


def require_opt_in(flag: bool = False) -> None:
    if not code_execution_allowed(flag):
        raise SandboxRefusedError(
            "This task runs code written by the model. It runs in a limited sandbox, but only when you opt in: "
            f"pass --allow-code-execution or set {OPT_IN_ENV}=1."
        )


def _interpreter() -> tuple[str, str]:
    """The base interpreter (not a venv's copy: the program needs only the standard library) and its install root."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable)), os.path.realpath(sys.base_prefix)


def hidden_directories() -> list[str]:
    """Directories replaced by an empty tmpfs: shared writable ones, the user's home, the model caches."""
    home = os.path.expanduser("~")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    candidates = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", home, os.environ.get("CELTK_CACHE", ""),
                  os.path.join(cache, "celtk"), os.environ.get("HF_HOME", ""), os.path.join(cache, "huggingface")]
    tools = [os.path.realpath(shutil.which(t) or "/") for t in ("sh", "setpriv", "mount", "mktemp", "chown")]
    out: list[str] = []
    for d in sorted({os.path.realpath(c) for c in candidates if c}, key=len):
        # never hide a tool the launcher needs, nor anything under a directory already hidden
        if d != "/" and os.path.isdir(d) and not any(t.startswith(d + "/") for t in tools) \
                and not any(d.startswith(h + "/") for h in out):
            out.append(d)
    return out


def _spawn(mode: str, token: str, program: str, limits: SandboxLimits, workdir: str,
           cgroup: ProgramCgroup | None, out, err) -> subprocess.Popen:
    python, prefix = _interpreter()
    if mode == "weak":
        command = [python, "-I", "-S", "-c", _RUNNER]
        drop = _nobody()
        if drop is not None:
            os.chown(workdir, drop, drop)
    else:
        userns = ["--user", "--map-root-user"] if mode == "user-namespaces" else []
        uid = "-" if mode == "user-namespaces" else str(_nobody())
        command = ["unshare", *userns, *_NAMESPACES, "sh", "-c", _LAUNCH, "celtk-sandbox", uid, python, prefix, _RUNNER,
                   *hidden_directories()]
        drop = None
    stdin = tempfile.TemporaryFile()
    stdin.write(f"{token}\n{int(mode == 'weak')}\n{program}\n".encode())
    stdin.seek(0)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": workdir, "TMPDIR": workdir,
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    joins = cgroup.join_fds() if cgroup else []
    try:
        return subprocess.Popen(command, cwd=workdir, env=env, stdin=stdin, stdout=out, stderr=err, close_fds=True,
                                preexec_fn=_preexec(limits, drop, joins, nproc=cgroup is None))
    finally:
        stdin.close()
        for fd in joins:
            os.close(fd)


def _preexec(limits: SandboxLimits, drop: int | None, joins: list[int], nproc: bool):
    extra = _own_process_count() if nproc and os.geteuid() != 0 else 0

    def apply() -> None:
        os.setsid()
        for fd in joins:  # into the program's cgroup before anything runs
            os.write(fd, str(os.getpid()).encode())
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:  # no pids cgroup: bound the user's processes (shared with the user's other processes)
            bound = limits.max_processes + extra
            resource.setrlimit(resource.RLIMIT_NPROC, (bound, bound))
        if drop is not None:
            os.setgroups([])
            os.setgid(drop)
            os.setuid(drop)

    return apply


def _own_process_count() -> int:
    uid = os.geteuid()
    count = 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            continue
    return count


def _nobody() -> int | None:
    """The uid (and gid: the same number is used for both) to run as when started as root."""
    return 65534 if os.geteuid() == 0 else None


def _exited(pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``pid`` to exit without reaping it, so that its pid (the process
    group's id) cannot be reused by an unrelated process before we have signalled the group."""
    deadline = time.monotonic() + seconds
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _end(process: subprocess.Popen, mode: str, cgroup: ProgramCgroup | None) -> bool:
    """End the program and everything it started: kill the namespace's PID 1 (the kernel then kills the
    rest, and ``unshare`` exits once they are gone), then the process group, then what the cgroup holds.
    Returns whether the cgroup refused the program memory."""
    if mode != "weak":
        try:
            with open(f"/proc/{process.pid}/task/{process.pid}/children") as handle:
                for pid in handle.read().split():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        _exited(process.pid, 10.0)
    try:  # `process` is not reaped yet, so its group id is still ours
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    if cgroup is None:
        return False
    exceeded = cgroup.memory_exceeded()
    cgroup.remove()
    return exceeded


def _execute(mode: str, program: str, limits: SandboxLimits) -> SandboxResult:
    token = os.urandom(16).hex()
    workdir = tempfile.mkdtemp(prefix="celtk-sandbox-")
    cgroup = make_cgroup(limits.memory_bytes, limits.max_processes)
    process = None
    timed_out = exceeded = False
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # files: a flood is bounded by RLIMIT_FSIZE
    try:
        process = _spawn(mode, token, program, limits, workdir, cgroup, out, err)
        timed_out = not _exited(process.pid, limits.wall_seconds)
    finally:
        if process is not None:
            exceeded = _end(process, mode, cgroup)
        elif cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    with out, err:
        out.seek(0)
        marker = out.read(len(token) + 1)
        err.seek(max(0, err.seek(0, os.SEEK_END) - 2000))
        stderr = err.read().decode(errors="replace")
    code = None if timed_out else process.returncode
    return SandboxResult(passed=not timed_out and code == 0 and marker == token.encode(), returncode=code,
                         timed_out=timed_out, stderr_tail=stderr[-500:], isolation=mode, memory_exceeded=exceeded)


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[str, str]:
    """(mode, why the namespace modes failed, if they did), found by running a program once."""
    missing = [tool for tool in ("unshare", "setpriv", "mount", "sh", "mktemp") if not shutil.which(tool)]
    if missing:
        return "weak", f"missing {', '.join(missing)}"
    mode = "root-namespaces" if os.geteuid() == 0 else "user-namespaces"
    probe = _execute(mode, "assert True", SandboxLimits(cpu_seconds=5, wall_seconds=30.0))
    return (mode, "") if probe.passed else ("weak", f"{mode} failed: {probe.stderr_tail.strip()[-200:]}")


def isolation() -> str:
    """The strongest isolation this machine allows: ``"root-namespaces"``, ``"user-namespaces"`` or
    ``"weak"`` (see the module docstring)."""
    return _probe()[0]


def weak_sandbox_allowed(flag: bool = False) -> bool:
    return flag or os.environ.get(WEAK_OPT_IN_ENV, "") == "1"


def run_untrusted(program: str, limits: SandboxLimits = SandboxLimits(), allow: bool = False,
                  allow_weak: bool = False) -> SandboxResult:
    """Run ``program`` (Python source) in the sandbox; ``passed`` iff every statement ran without raising.

    Raises:
        SandboxRefusedError: code execution not opted in, or only the weak mode is available and
            it was not opted in to either.
    """
    require_opt_in(allow)
    mode = isolation()
    if mode == "weak" and not weak_sandbox_allowed(allow_weak):
        raise SandboxRefusedError(
            f"This machine allows no namespace isolation for model-written code ({_probe()[1] or 'probe failed'}), so "
            "programs would run only with resource limits and, as root, as `nobody`. Run as root with util-linux, "
            f"enable unprivileged user namespaces, or accept the weaker sandbox with {WEAK_OPT_IN_ENV}=1."
        )
    return _execute(mode, program, limits)
