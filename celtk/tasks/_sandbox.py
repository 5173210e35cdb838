"""Run model-written code in a separate, limited process.

Limits: CPU time, wall time, address space, number of processes, file size; a fresh
temporary working directory; no network (a new network namespace when the kernel lets
us make one, and sockets disabled in the interpreter in any case); when started as root
the child drops to the ``nobody`` user so it cannot write the user's files or signal
the parent, and runs in its own mount namespace where every world-writable directory
(``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``) is a private, empty, size-limited
tmpfs (except one that holds the Python interpreter itself): the only place it can write is
its own working directory, which vanishes with it.
The child's whole process group is killed afterwards.
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
from dataclasses import dataclass

from celtk.errors import SandboxRefusedError

OPT_IN_ENV = "CELTK_ALLOW_CODE_EXEC"

# Runs before the untrusted code, inside the child interpreter.
_PRELUDE = r"""
import socket as _s
def _no_net(*a, **k):
    raise OSError("network access is disabled in the celtk sandbox")
_s.socket = _no_net; _s.create_connection = _no_net; _s.socketpair = _no_net
import os as _os
_own = _os.getpid()
def _no_kill(pid, sig, _real=_os.kill):
    if pid != _os.getpid():  # a second line of defence where the child cannot drop to `nobody`
        raise PermissionError("signalling other processes is disabled in the celtk sandbox")
    return _real(pid, sig)
_os.kill = _no_kill; _os.killpg = lambda *a: _no_kill(-1, 0)
del _s, _no_net, _os, _own
"""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    returncode: int | None
    timed_out: bool
    stderr_tail: str


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_bytes: int = 1 << 30
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


# World-writable directories: inside the mount namespace each becomes a private empty tmpfs.
_SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

# Run as root inside the new namespaces: hide the shared writable directories, copy the
# program into a fresh working directory on the private /tmp, then drop to `nobody`.
_LAUNCH = r"""
set -e
program=$(cat "$1"); uid=$2; gid=$3; python=$4; shift 4
mount --make-rprivate /
for d in "$@"; do
  if [ -d "$d" ]; then mount -t tmpfs -o size=16m,mode=1777,nosuid,nodev tmpfs "$d"; fi
done
work=$(mktemp -d /tmp/celtk-sandbox-XXXXXX)
printf '%s\n' "$program" > "$work/program.py"
chown -R "$uid:$gid" "$work"
cd "$work"
export HOME="$work" TMPDIR="$work"
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups "$python" -I -S "$work/program.py"
"""


def _interpreter() -> str:
    """The real interpreter binary (a virtual environment's ``python`` is a link to it): the
    sandboxed program needs only the standard library, and the venv may sit under a hidden /tmp."""
    return os.path.realpath(sys.executable)


def _hidden_dirs() -> list[str]:
    """The world-writable directories to hide, except one that holds the interpreter or its
    standard library (hiding it would leave nothing to run)."""
    needed = [_interpreter(), os.path.realpath(sys.base_prefix)]
    return [d for d in _SHARED_WRITABLE if not any(p == d or p.startswith(d + "/") for p in needed)]


@functools.lru_cache(maxsize=None)
def _isolation(drop_to: tuple[int, int] | None) -> str:
    """Which isolation this machine allows: ``"namespaces"`` (network + mount namespace and
    ``nobody``; needs root and util-linux), ``"nobody"`` (only the user drop), or ``"none"``."""
    if drop_to is None:
        return "none"
    if os.geteuid() == 0 and all(shutil.which(tool) for tool in ("unshare", "setpriv", "mount", "sh")):
        probe = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", "mount --make-rprivate / && mount -t tmpfs tmpfs /tmp"],
                               capture_output=True)
        if probe.returncode == 0:
            return "namespaces"
    return "nobody"


def _preexec(limits: SandboxLimits, drop_to: tuple[int, int] | None):
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # inherited: once the child runs as `nobody`, its forks count against this bound
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
        if drop_to is not None:
            os.setgroups([])
            os.setgid(drop_to[1])
            os.setuid(drop_to[0])

    return apply


def _nobody() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def run_untrusted(program: str, limits: SandboxLimits = SandboxLimits(), allow: bool = False) -> SandboxResult:
    """Run ``program`` (Python source) in the sandbox; ``passed`` iff it exits 0 in time."""
    require_opt_in(allow)
    workdir = tempfile.mkdtemp(prefix="celtk-sandbox-")
    drop_to = _nobody()
    isolation = _isolation(drop_to)
    script = os.path.join(workdir, "program.py")
    with open(script, "w") as handle:
        handle.write(_PRELUDE + "\n" + program + "\n")
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": workdir, "TMPDIR": workdir,
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    if isolation == "namespaces":
        # the launcher reads the script before /tmp is hidden, then drops to `nobody` itself
        command = ["unshare", "--net", "--mount", "sh", "-c", _LAUNCH, "sandbox", script,
                   str(drop_to[0]), str(drop_to[1]), _interpreter(), *_hidden_dirs()]
        preexec_drop = None
    else:
        if drop_to is not None:
            os.chown(workdir, *drop_to)
            os.chown(script, *drop_to)
        command = [sys.executable, "-I", "-S", script]
        preexec_drop = drop_to
    process = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, preexec_fn=_preexec(limits, preexec_drop), close_fds=True)
    timed_out = False
    try:
        _, stderr = process.communicate(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        stderr = b""
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        _kill_user_leftovers(drop_to)
        shutil.rmtree(workdir, ignore_errors=True)
    code = None if timed_out else process.returncode
    return SandboxResult(passed=code == 0, returncode=code, timed_out=timed_out, stderr_tail=stderr.decode(errors="replace")[-500:])


def _kill_user_leftovers(drop_to: tuple[int, int] | None) -> None:
    """Processes that escaped the group by calling setsid still belong to ``nobody``: end them."""
    if drop_to is None:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == drop_to[0]:
                os.kill(int(entry), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
