"""Run model-written code in an isolated, limited process, and grade it as lm-eval's ``code_eval`` does.

Isolation, strongest the machine allows (:func:`isolation`):

* ``root-namespaces`` (started as root): new PID, IPC, mount and network namespaces and a new root
  file system holding only what the interpreter needs (its executable and standard library, the
  system's shared libraries, ``/dev/null`` and the random devices, all read-only) and an empty
  private ``/tmp`` that is the program's working directory and home: not the project, the model
  caches, other tasks' data, ``/proc`` or anything else of the host; the program runs as
  ``nobody`` with no capabilities.
* ``user-namespaces`` (not root, unprivileged user namespaces allowed): the same namespaces and
  root file system inside a user namespace; the program keeps the caller's uid (without capabilities).
* ``weak`` (neither): only limits, a process group and, as root, the ``nobody`` user. Refused
  unless the user opts in (``allow_weak`` / ``CELTK_ALLOW_WEAK_SANDBOX=1``).

The tools that build the namespaces are found by absolute path in the system's directories
(:data:`TOOL_DIRS`), never on ``PATH``.

Limits: CPU and wall time, address space per process, file size; memory and process count for the
whole program by a cgroup where one can be made (:mod:`._sandbox_cgroup`), else per process plus
``RLIMIT_NPROC``. Cleanup ends the PID namespace (the kernel kills every process in it) or, in
the weak mode, the process group; it never kills by user.

Grading: the program runs under a small runner, as ``exec`` in fresh globals like ``code_eval``, in
the process's main thread (so ``signal.signal`` and ``signal.alarm`` work as under lm-eval); it
passes only if ``exec`` returned normally, i.e. every statement ran, every assertion held and
nothing raised (``SystemExit`` included). Exit status alone proves nothing: only a per-run random
token, written to a private copy of stdout, does. The token lives only in a supervisor thread of
the runner, never in the main thread, where the program's signal handlers run and see every frame.
The supervisor writes it when the main thread's runner frame stands on the line after a normal
return from ``exec`` (it reads that frame's instruction offset; the program cannot move a frame
without tracing, which the guard refuses), so no handler, ``atexit`` hook, ``os._exit`` code,
replaced builtin or rebound runner global can pass wrong code. An audit guard
(:func:`sys.addaudithook`, which no Python code can remove, its state bound in its closure) refuses
the program every way Python offers to reach another thread's frames or objects
(``sys._getframe``, traceback, generator and coroutine frames, tracing, profiling and
``sys.monitoring``, ``gc``'s object lists), to read memory (``ctypes`` and the test modules,
``/proc``'s files, code objects built from bytes) or to start a process without the guard (``exec``,
``posix_spawn``, ``subprocess``). A forked child has no supervisor, so it never holds the token.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, no_type_check

from celtk.errors import SandboxRefusedError
from celtk.tasks._sandbox_cgroup import ProgramCgroup, make_cgroup

OPT_IN_ENV = "CELTK_ALLOW_CODE_EXEC"
WEAK_OPT_IN_ENV = "CELTK_ALLOW_WEAK_SANDBOX"
TOOL_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")  # where the namespace tools are looked up, in order
TOOLS = ("unshare", "setpriv", "mount", "umount", "pivot_root", "sh", "mkdir", "ln")

# Runs inside the sandbox as `python -I -S -c RUNNER`; stdin holds
# "<token>\n<weak 0|1><guard 0|1><the pass line's number>\n<program>".
_RUNNER = r"""
# celtk-sandbox-runner
import _thread, os, signal, sys, time

def _setup():
    token, flags, source = sys.stdin.buffer.read().split(b"\n", 2)
    null = os.open(os.devnull, os.O_RDWR)
    channel, errors = os.dup(1), os.dup(2)  # private copies; the program's 0, 1, 2 go to /dev/null
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    weak = flags[:1] == b"1"
    if weak:  # no namespaces: keep the program off the network and off other processes
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
    # imports compile from source from now on: a cached .pyc would need marshal, which the guard refuses
    sys.dont_write_bytecode, sys.pycache_prefix = True, "/nonexistent/celtk-sandbox"
    return token, weak, flags[1:2] == b"1", int(flags[2:]), source, channel, errors

_FRAMES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_REFUSED = frozenset({
    "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys._settraceallthreads",
    "sys._setprofileallthreads", "sys.monitoring.register_callback", "sys.addaudithook", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "code.__new__", "marshal.load", "marshal.loads", "os.exec",
    "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "os.symlink", "os.link"})
_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_testcapi", "_testinternalcapi", "_testbuffer",
                      "_testmultiphase", "_testsinglephase", "_testimportmultiple", "_xxsubinterpreters",
                      "_xxinterpchannels", "_xxtestfuzz"})

def _arm(weak, frames=_FRAMES, refused=_REFUSED, modules=_MODULES, add=sys.addaudithook, text=str.__str__,
         stat=os.stat, denied=PermissionError, no_frame=ValueError):
    # Everything the guard uses is bound here: the program may rebind this module's globals and builtins.
    proc = stat("/proc").st_dev if weak and os.path.isdir("/proc") else None
    def guard(event, args):
        if event == "sys._getframe":
            raise no_frame("call stack frames are not available in the celtk sandbox")
        if event in refused or event.startswith("ctypes."):
            raise denied(f"{event} is disabled in the celtk sandbox")
        if event == "object.__getattr__" and args[1] in frames:
            raise denied(f"reading {args[1]} is disabled in the celtk sandbox")
        if event == "import" and text(args[0]).partition(".")[0] in modules:
            raise denied(f"import of {text(args[0])} is disabled in the celtk sandbox")
        if proc is not None and event == "open":
            try:  # the kernel resolves the path as open will: any name of a file of /proc
                inside = stat(args[0]).st_dev == proc
            except (OSError, TypeError, ValueError):
                inside = False
            if inside:
                raise denied("/proc (process memory among it) is not readable in the celtk sandbox")
    add(guard)

def _supervise(token, frame, passing, channel, wait, write=os.write, leave=os._exit, caught=BaseException):
    # The only holder of the token, in a thread of its own: Python runs signal handlers in the main thread
    # only, and the guard keeps every way to another thread's frames from the program. It passes the
    # program when the main thread's runner frame stands on the pass line, which only a normal return
    # from exec reaches; nothing the program installs can move that frame there.
    while True:
        try:
            if frame.f_lasti in passing:
                break
            wait(True, 0.05)
        except caught:
            pass
    try:
        write(channel, token)
    except caught:
        leave(1)
    leave(0)

def _describe(error):
    tb, line = error.__traceback__, None
    if tb is not None and tb.tb_next is not None:  # the program's own top-level line
        line = tb.tb_next.tb_lineno
    try:
        text = f"{type(error).__name__}: {error}"
    except BaseException:
        text = type(error).__name__
    return (f"program.py, line {line}: " if line else "") + text

def _failed(error, errors, write=os.write, leave=os._exit):
    try:
        write(errors, _describe(error)[-2000:].encode(errors="replace"))
    finally:
        leave(1)

def _arrived(release, pid, getpid=os.getpid, mask=signal.pthread_sigmask, block=signal.SIG_BLOCK,
             every=signal.valid_signals(), sleep=time.sleep, leave=os._exit, caught=BaseException):
    if getpid() != pid:  # a forked copy that ran the program to its end holds no supervisor: exit as Python would
        leave(0)
    mask(block, every)  # no more handlers of the program from here
    try:
        release()  # wake the supervisor, which sees this frame's caller on the pass line
    except caught:
        pass
    while True:
        sleep(60)

def _main(getframe=sys._getframe, start=_thread.start_new_thread, lock=_thread.allocate_lock,
          stack=_thread.stack_size, mask=signal.pthread_sigmask, getpid=os.getpid, failed=_failed,
          arrived=_arrived, leave=os._exit, caught=BaseException):
    token, weak, guard, line, source, channel, errors = _setup()
    here = getframe()
    passing = frozenset(at for begin, end, number in here.f_code.co_lines() if number == line
                        for at in range(begin, end, 2))
    gate = lock()
    gate.acquire()
    mask(signal.SIG_BLOCK, signal.valid_signals())  # the supervisor's thread starts, and stays, with all blocked
    stack(1 << 18)
    start(_supervise, (token, here, passing, channel, gate.acquire))
    stack(0)
    del token
    release, pid = gate.release, getpid()
    if guard:
        _arm(weak)
    mask(signal.SIG_SETMASK, [])  # the program runs in the main thread, with signals as Python starts them
    try:
        exec(compile(source, "program.py", "exec"), {})
    except caught as error:
        failed(error, errors)
    else:
        arrived(release, pid)  # the pass line
    leave(1)

def _linger(sleep=time.sleep, leave=os._exit, caught=BaseException):
    # Reached only if a handler of the program raised on the way out: give the supervisor its look, then fail.
    waited = 0
    while waited < 40:
        waited += 1
        try:
            sleep(0.05)
        except caught:
            pass
    leave(1)

try:
    _main()
finally:
    _linger()
"""
_PASS_LINE = next(number for number, text in enumerate(_RUNNER.splitlines(), 1) if text.endswith("# the pass line"))

# Runs as PID 1 of the new namespaces (root there): build a new root holding only the paths given
# (read-only binds, or symlinks) and an empty /tmp, pivot into it, drop the old root, then run the
# runner without capabilities (as `nobody` when we are root). PID 1 stays a shell, so when the
# program ends the kernel ends every process it left.
_LAUNCH = r"""
set -e
root=$1 uid=$2 python=$3 runner=$4 setpriv=$5 mount=$6 umount=$7 pivot=$8 mkdir=$9; ln=${10}; shift 10
"$mount" --make-rprivate /
"$mount" -t tmpfs -o size=16m,mode=755 celtk-root "$root"
cd "$root"
while [ $# -gt 0 ]; do
  kind=$1 path=$2 target=$3; shift 3
  "$mkdir" -p ".${path%/*}"
  case $kind in
    l) "$ln" -s "$target" ".$path";;
    d) "$mkdir" -p ".$path"; "$mount" --bind "$path" ".$path"; "$mount" -o remount,bind,ro,nosuid ".$path";;
    f) : > ".$path"; "$mount" --bind "$path" ".$path"; "$mount" -o remount,bind,ro,nosuid ".$path";;
  esac
done
"$mkdir" -p tmp .old proc
"$mount" -t tmpfs -o size=16m,mode=1777,nosuid,nodev celtk-tmp tmp
"$mount" -o remount,bind,ro "$root"
"$pivot" . .old
"/.old$mount" -n --move /.old/proc /proc  # umount reads the mount table there
"$umount" -n -l /.old
"$umount" -n -l /proc
cd /tmp
export HOME=/tmp TMPDIR=/tmp
drop="--inh-caps=-all --bounding-set=-all --no-new-privs"
if [ "$uid" != - ]; then drop="--reuid=$uid --regid=$uid --clear-groups $drop"; fi
"$setpriv" $drop "$python" -I -S -c "$runner"
"""

_NAMESPACES = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--mount", "--net"]
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32")


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


@functools.cache
def tools() -> dict[str, str]:
    """The namespace tools by absolute path, from :data:`TOOL_DIRS` only: an executable of the same name
    earlier on ``PATH`` (a wrapper, a shim) is never run. Missing tools are absent from the result."""
    found = {}
    for name in TOOLS:
        for directory in TOOL_DIRS:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                found[name] = path
                break
    return found


def sandbox_paths() -> list[tuple[str, str, str]]:
    """What the program's root file system holds besides an empty ``/tmp``, as ``(kind, path, target)``:
    ``f``/``d`` a file or directory bound read-only at the same path, ``l`` a symlink to ``target``.

    The interpreter's executable and standard library (and its shared library's directory), the
    system's library directories (for the dynamic loader), ``/etc/ld.so.cache``, the ``setpriv``
    that drops privileges and the ``umount`` that detaches the host's root, and a few devices. Nothing
    else: not the project, the home directory, the caches, other tasks' data or ``/proc``."""
    python, prefix = _interpreter()
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
                                     "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix})
    libdir = sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") else None
    dirs = [base["stdlib"], base["platstdlib"], libdir or "", *_LIBRARY_DIRS]
    files = [python, tools().get("setpriv", ""), tools().get("umount", ""), "/etc/ld.so.cache", *_DEVICES]
    out: list[tuple[str, str, str]] = []
    bound: list[str] = []

    def covered(path: str) -> bool:
        return any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound)

    for path in [d for d in dirs if d] + [f for f in files if f]:
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) and path in _LIBRARY_DIRS:  # /lib -> usr/lib: the link, and its target bound below
            out.append(("l", path, os.readlink(path)))
            path = os.path.realpath(path)
        real = os.path.realpath(path)
        if covered(real):
            continue
        kind = "d" if os.path.isdir(real) else "f"
        out.append((kind, real, "-"))
        if kind == "d":
            bound.append(real)
    return sorted(out, key=lambda entry: (entry[0] == "l", entry[1]))


SPAWN_ATTEMPTS = 3
"""Starts of the sandbox's child before giving up: a child that fails while it sets its limits (before exec, so
none of the program has run) is started again, and writes why to its stderr. The one such failure seen (the MBPP
probe's child, now and then in CI) came from a test-only type-check wrapper that allocated after the address-space
cap (see ``_reporting``); the retry stays for what a loaded machine may still refuse a fresh fork."""


def _spawn(mode: str, token: str, program: str, limits: SandboxLimits, workdir: str,
           cgroup: ProgramCgroup | None, out: IO[bytes], err: IO[bytes], guard: bool = True
           ) -> subprocess.Popen[bytes]:
    python, _ = _interpreter()
    if mode == "weak":
        command = [python, "-I", "-S", "-c", _RUNNER]
        drop = _nobody()
        if drop is not None:
            os.chown(workdir, drop, drop)
    else:
        userns = ["--user", "--map-root-user"] if mode == "user-namespaces" else []
        uid = "-" if mode == "user-namespaces" else str(_nobody())
        t = tools()
        command = [t["unshare"], *userns, *_NAMESPACES, t["sh"], "-c", _LAUNCH, "celtk-sandbox", workdir, uid, python,
                   _RUNNER, t["setpriv"], t["mount"], t["umount"], t["pivot_root"], t["mkdir"], t["ln"],
                   *(part for entry in sandbox_paths() for part in entry)]
        drop = None
    stdin = tempfile.TemporaryFile()
    stdin.write(f"{token}\n{int(mode == 'weak')}{int(guard)}{_PASS_LINE}\n{program}\n".encode())
    stdin.seek(0)
    env = {"PATH": ":".join(TOOL_DIRS), "HOME": workdir, "TMPDIR": workdir, "PYTHONDONTWRITEBYTECODE": "1",
           "LANG": "C.UTF-8"}
    joins = cgroup.join_fds() if cgroup else []
    try:
        for attempt in range(SPAWN_ATTEMPTS):
            try:
                return subprocess.Popen(command, cwd=workdir, env=env, stdin=stdin, stdout=out, stderr=err,
                                        close_fds=True,
                                        preexec_fn=_reporting(_preexec(limits, drop, joins, nproc=cgroup is None)))
            except subprocess.SubprocessError as error:  # the child failed before exec: nothing of the program ran
                err.seek(0)
                why = err.read().decode(errors="replace").strip() or str(error)
                if attempt + 1 == SPAWN_ATTEMPTS:
                    raise SandboxRefusedError(f"The sandbox could not start its child process ({why}), "
                                              f"{SPAWN_ATTEMPTS} times; the program was not run.") from error
                err.seek(0)
                err.truncate()
                stdin.seek(0)
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
    finally:
        stdin.close()
        for fd in joins:
            os.close(fd)


# The two functions below and what they return run in the forked child before exec. ``no_type_check`` keeps
# the jaxtyping import hook (pytest's ``--jaxtyping-packages=celtk``) from wrapping them in a runtime type
# check: such a wrapper runs Python, and allocates, after ``RLIMIT_AS`` has capped the child's address space,
# which on a loaded machine failed the child now and then ("Exception occurred in preexec_fn").
@no_type_check
def _reporting(setup: Callable[[], None]) -> Callable[[], None]:
    """``setup``, run in the child before exec, writing why it failed to the child's stderr: the parent's
    ``subprocess`` says only "Exception occurred in preexec_fn"."""

    def run() -> None:
        try:
            setup()
        except BaseException as error:
            os.write(2, f"setting up the child failed: {error!r}".encode())
            raise

    return run


@no_type_check
def _preexec(limits: SandboxLimits, drop: int | None, joins: list[int], nproc: bool) -> Callable[[], None]:
    extra = _own_process_count() if nproc and os.geteuid() != 0 else 0

    def apply() -> None:
        os.setsid()
        for fd in joins:  # into the program's cgroup before anything runs
            os.write(fd, str(os.getpid()).encode())
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:  # no pids cgroup: bound the user's processes (shared with the user's other processes)
            bound = limits.max_processes + extra
            resource.setrlimit(resource.RLIMIT_NPROC, (bound, bound))
        if drop is not None:
            os.setgroups([])
            os.setgid(drop)
            os.setuid(drop)
        # last: until exec this child is a fork of the caller's (large) interpreter, so once its address space is
        # capped any Python allocation that needs a fresh arena can fail, and such a MemoryError reaches the caller
        # only as "Exception occurred in preexec_fn"; lowering a limit needs no privilege
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))

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


def _end(process: subprocess.Popen[bytes], mode: str, cgroup: ProgramCgroup | None) -> bool:
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


def _execute(mode: str, program: str, limits: SandboxLimits, guard: bool = True) -> SandboxResult:
    """Run ``program`` in ``mode``; ``guard=False`` (tests only) lets it use what the audit guard refuses
    (``ctypes``, ``exec``), to show that the namespaces contain native code on their own."""
    token = os.urandom(16).hex()
    workdir = tempfile.mkdtemp(prefix="celtk-sandbox-")
    cgroup = make_cgroup(limits.memory_bytes, limits.max_processes)
    process = None
    timed_out = exceeded = False
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # files: a flood is bounded by RLIMIT_FSIZE
    try:
        process = _spawn(mode, token, program, limits, workdir, cgroup, out, err, guard)
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


@functools.cache
def _probe() -> tuple[str, str]:
    """(mode, why the namespace modes failed, if they did), found by running a program once."""
    missing = [tool for tool in TOOLS if tool not in tools()]
    if missing:
        return "weak", f"no {', '.join(missing)} in {', '.join(TOOL_DIRS)}"
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
