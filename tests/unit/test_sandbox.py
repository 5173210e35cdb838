"""Model-written code fails safely in the sandbox, is graded as lm-eval grades it, and stays in its box.

Runs as root (``make test``) and again as a non-root user (``tests/run_unprivileged.sh``); each test
asserts what the isolation mode of that pass promises. No conftest fixtures are used (the
unprivileged pass runs with ``--noconftest``).
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from celtk.errors import SandboxRefusedError
from celtk.tasks import _sandbox as sandbox
from celtk.tasks._sandbox import SandboxLimits, isolation, run_untrusted
from celtk.tasks._sandbox_cgroup import make_cgroup

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=4.0, memory_bytes=512 << 20)
ROOT = os.geteuid() == 0
NAMESPACES = isolation() != "weak"
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="no namespaces here: the weak mode (documented) applies")


def run(program: str, limits: SandboxLimits = FAST) -> sandbox.SandboxResult:
    return run_untrusted(program, limits, allow=True, allow_weak=True)


def native(program: str, limits: SandboxLimits = FAST) -> sandbox.SandboxResult:
    """``program`` without the runner's audit guard, so it may use ``ctypes``: what the namespaces alone
    contain (the layer under the guard, for a program that got past it)."""
    return sandbox._execute(isolation(), program, limits, guard=False)


def sandbox_user_process(token: str) -> subprocess.Popen:
    """A process unrelated to any sandbox, of the user sandboxed programs run as, with ``token`` in its command line."""
    kwargs: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []} if ROOT else {}
    return subprocess.Popen(["sh", "-c", "sleep 60; :", token], **kwargs)


def host_processes_named(comm: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_refused_without_opt_in(monkeypatch):
    monkeypatch.delenv("CELTK_ALLOW_CODE_EXEC", raising=False)
    with pytest.raises(SandboxRefusedError, match="CELTK_ALLOW_CODE_EXEC=1"):
        run_untrusted("print(1)")


def test_env_opt_in(monkeypatch):
    monkeypatch.setenv("CELTK_ALLOW_CODE_EXEC", "1")
    monkeypatch.setenv("CELTK_ALLOW_WEAK_SANDBOX", "1")
    assert run_untrusted("assert 1 + 1 == 2", FAST).passed


def test_isolation_is_the_strongest_this_user_may_have():
    if ROOT:
        assert isolation() == "root-namespaces"
    else:
        assert isolation() in ("user-namespaces", "weak")
    assert run("assert True").isolation == isolation()


def test_weak_mode_is_refused_unless_opted_in(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation", lambda: "weak")
    monkeypatch.delenv("CELTK_ALLOW_WEAK_SANDBOX", raising=False)
    with pytest.raises(SandboxRefusedError, match="CELTK_ALLOW_WEAK_SANDBOX=1"):
        run_untrusted("assert True", FAST, allow=True)


def test_failing_assert_fails():
    assert not run("assert 1 == 2").passed


# --- grading: only a program whose every statement ran without raising passes (lm-eval's code_eval) ---

WRONG = "def add(a, b):\n    return a - b\n"
RIGHT = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0\n"


@pytest.mark.parametrize("name,bypass", [
    ("sys.exit(0)", "import sys\nsys.exit(0)\n"),
    ("raise SystemExit", "raise SystemExit\n"),
    ("raise SystemExit(0)", "raise SystemExit(0)\n"),
    ("os._exit(0)", "import os\nos._exit(0)\n"),
    ("atexit hook", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
    ("atexit sys.exit", "import atexit, sys\natexit.register(sys.exit, 0)\n"),
    ("thread os._exit",
     "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n"),
    ("marker on every fd", "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'PASS\\n0' * 8)\n"
                           "    except OSError:\n        pass\n"),
    ("exit status of a forked child", "import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\n"),
])
def test_wrong_code_with_an_exit_trick_fails(name, bypass):
    assert run(WRONG + TESTS + "\n").passed is False  # control: the code is wrong
    assert not run(WRONG + bypass + TESTS).passed, name  # trick before the tests run
    assert not run(bypass + WRONG + TESTS).passed, name  # trick armed, then the tests fail


# Tricks a program in the main thread could try with what it installs: handlers, hooks, replaced builtins.
_EVERY_FD = ("    for fd in range(3, 64):\n        try:\n            os.write(fd, b'0' * 32)\n"
             "        except OSError:\n            pass\n")
HANDLER_TRICKS = {
    "a handler on every catchable signal exits 0":
        "import os, signal, time\nfor s in signal.valid_signals():\n    try:\n"
        "        signal.signal(s, lambda *a: os._exit(0))\n    except (OSError, ValueError):\n        pass\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\ntime.sleep(0.05)\n",
    "a handler raises SystemExit(0)":
        "import signal, time\ndef _leave(signum, frame):\n    raise SystemExit(0)\n"
        "signal.signal(signal.SIGALRM, _leave)\nsignal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\ntime.sleep(0.05)\n",
    "a handler writes a marker to every fd":
        "import os, signal, time\ndef _mark(signum, frame):\n" + _EVERY_FD + "    os._exit(0)\n"
        "signal.signal(signal.SIGALRM, _mark)\nsignal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\ntime.sleep(0.05)\n",
    "a handler jumps a frame past the tests":
        "import signal, time\ndef _jump(signum, frame):\n    while frame is not None:\n"
        "        for line in sorted({n for _, _, n in frame.f_code.co_lines() if n and n > frame.f_lineno}):\n"
        "            try:\n                frame.f_trace = lambda *a: None\n                frame.f_lineno = line\n"
        "                break\n            except (ValueError, AttributeError):\n                pass\n"
        "        frame = frame.f_back\nsignal.signal(signal.SIGALRM, _jump)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\ntime.sleep(0.05)\n",
    "a handler releases every lock in reach (wakes the supervisor early)":
        "import signal, time\ndef _wake(signum, frame):\n    while frame is not None:\n"
        "        for v in list(frame.f_locals.values()):\n            for w in (v, getattr(v, '__self__', None)):\n"
        "                try:\n                    w.release()\n"
        "                except Exception:\n                    pass\n"
        "        frame = frame.f_back\nsignal.signal(signal.SIGALRM, _wake)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\ntime.sleep(0.05)\n",
    "atexit writes a marker to every fd": "import atexit, os\ndef _mark():\n" + _EVERY_FD + "atexit.register(_mark)\n",
    "sys.exit replaced": "import sys\nsys.exit = lambda *a: None\nsys.exit(0)\n",
    "a forked child writes a marker to every fd and exits 0":
        "import os\nif os.fork() == 0:\n" + _EVERY_FD + "    os._exit(0)\nos.wait()\n",
    "the runner's globals rebound":
        "import __main__\nfor _k, _v in list(vars(__main__).items()):\n"
        "    if _k.startswith('_') and not _k.startswith('__'):\n"
        "        setattr(__main__, _k, frozenset() if isinstance(_v, frozenset) else (lambda *a, **k: None))\n",
    "exceptions and checks replaced in builtins":
        "import builtins\nbuiltins.BaseException = builtins.Exception = type('Nothing', (Warning,), {})\n"
        "builtins.isinstance = lambda *a: False\nbuiltins.len = lambda *a: 0\n",
}


@pytest.mark.parametrize("name", sorted(HANDLER_TRICKS))
def test_wrong_code_with_a_handler_or_hook_trick_fails(name):
    """Whatever the program installs before or among its failing tests, they fail."""
    trick = HANDLER_TRICKS[name]
    assert not run(trick + WRONG + TESTS).passed, name
    assert not run(WRONG + trick + TESTS).passed, name


def test_correct_code_passes_whatever_it_leaves_behind():
    right = RIGHT
    assert run(right + TESTS).passed
    assert run(right + "import atexit, os\natexit.register(lambda: os._exit(3))\n" + TESTS).passed  # hooks never run
    assert run(right + "print('noise')\nimport sys\nsys.stderr.write('x' * 100000)\n" + TESTS).passed


def test_main_guard_does_not_run_as_in_code_eval():
    """code_eval execs the program in fresh globals, so ``__name__`` is not ``"__main__"`` there either."""
    assert run("def f():\n    return 1\nif __name__ == '__main__':\n    assert False\nassert f() == 1").passed


def test_a_program_may_signal_itself_and_handle_signals():
    """The program runs in the process's main thread, as under code_eval: signal 0 to its own pid works,
    and so do Python signal handlers: a SIGALRM time limit by ``signal.alarm``, and a repeating timer whose
    handler still fires after the tests have passed."""
    program = "import os, signal, threading\nos.kill(os.getpid(), 0)\nsignal.pthread_kill(threading.get_ident(), 0)"
    assert run(program).passed
    alarm = ("import signal\ndef too_slow(signum, frame):\n    raise TimeoutError\n"
             "signal.signal(signal.SIGALRM, too_slow)\nsignal.alarm(2)\n" + RIGHT + TESTS + "signal.alarm(0)\n")
    ticking = ("import signal\nticks = []\nsignal.signal(signal.SIGALRM, lambda signum, frame: ticks.append(signum))\n"
               "signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)\nwhile not ticks:\n    pass\n" + RIGHT + TESTS)
    for correct in (alarm, ticking):
        result = run(correct)
        assert result.passed, result.stderr_tail
    assert not run(alarm.replace(RIGHT, WRONG)).passed


def nobody_can_run_python() -> bool:
    try:
        return subprocess.run([sys.executable, "-c", "pass"], user=65534, group=65534, extra_groups=[],
                              capture_output=True).returncode == 0
    except PermissionError:
        return False


def test_the_weak_modes_kill_guard_allows_the_programs_own_pid(monkeypatch):
    if ROOT and not nobody_can_run_python():
        pytest.skip("`nobody` cannot run this interpreter (it lives in root's home): the weak mode cannot run here")
    monkeypatch.setattr(sandbox, "isolation", lambda: "weak")
    program = ("import os\nos.kill(os.getpid(), 0)\n"
               "try:\n    os.kill(1, 0)\nexcept PermissionError:\n    pass\nelse:\n    raise AssertionError('guard')")
    result = run(program)
    assert result.isolation == "weak" and result.passed, result.stderr_tail


# --- resource limits ---

HOSTILE = [
    ("infinite loop", "while True:\n    pass"),
    ("sleep past wall time", "import time\ntime.sleep(60)"),
    ("memory bomb", "x = bytearray(4 << 30)\nassert False"),
    ("fork bomb", "import os\nwhile True:\n    os.fork()"),
    ("socket", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)"),
    ("raw socket module", "import _socket\ns = _socket.socket()\ns.connect(('1.1.1.1', 80))"),
    ("kill parent", f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\nassert False"),
]


@pytest.mark.parametrize("name,program", HOSTILE, ids=[name for name, _ in HOSTILE])  # not by the program: a pid
def test_hostile_code_fails_safely(name, program):
    result = run(program)
    assert not result.passed, name
    assert run("assert True").passed  # and evaluation continues


def test_process_count_is_bounded():
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=6.0, memory_bytes=512 << 20, max_processes=8)
    program = ("import os, time\nkids = []\nfor _ in range(40):\n    pid = os.fork()\n    if pid == 0:\n"
               "        time.sleep(3)\n        os._exit(0)\n    kids.append(pid)\n")
    assert run(program, limits).passed is False


def test_memory_limit_covers_the_whole_program():
    """Three children of 300 MiB each under a 512 MiB limit: the per-process limit alone would allow it."""
    probe = make_cgroup(64 << 20, 8)
    if probe is None:
        pytest.skip("no writable cgroup for this user: memory is limited per process (RLIMIT_AS) only, documented")
    probe.remove()
    program = ("import os\nreads = []\nfor _ in range(3):\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
               "        hold = b'x' * (300 << 20)\n        os.write(w, b'1')\n        import time; time.sleep(5)\n"
               "        os._exit(0)\n    os.close(w)\n    reads.append(r)\n"
               "assert all(os.read(r, 1) == b'1' for r in reads)\n")
    result = run(program, SandboxLimits(cpu_seconds=5, wall_seconds=8.0, memory_bytes=512 << 20))
    assert not result.passed and result.memory_exceeded


# --- isolation ---

@pytest.mark.parametrize("where", ["project", "tmp", "var_tmp", "dev_shm", "home"])
def test_cannot_write_outside_sandbox(where):
    base = {"project": Path.cwd(), "tmp": Path("/tmp"), "var_tmp": Path("/var/tmp"), "dev_shm": Path("/dev/shm"),
            "home": Path.home()}[where]
    if not base.is_dir():
        pytest.skip(f"{base} does not exist here")
    target = base / f"escape-{uuid.uuid4().hex}.txt"
    program = f"open({str(target)!r}, 'w').write('escaped')\nimport os\nos.sync()"
    result = run(program)
    assert not target.exists()
    if where == "project":  # not writable by the sandbox user at all
        assert not result.passed


def test_cannot_read_the_users_temporary_files(tmp_path):
    secret = tmp_path / "secret.txt"  # under the user's /tmp
    secret.write_text("key")
    os.chmod(secret, 0o644)
    os.chmod(tmp_path, 0o755)
    assert not run(f"print(open({str(secret)!r}).read())").passed


def test_own_working_directory_is_writable():
    program = "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'"
    assert run(program).passed


@needs_namespaces
def test_venv_copy_under_tmp_hides_tmp_and_the_cache_and_leaves_nothing(tmp_path):
    """CI may clone (and build a ``venv --copies``) under /tmp: the program must still run, see a private /tmp,
    not read the model cache, and leave no working directory behind."""
    venv, cache = tmp_path / "venv", tmp_path / "cache"
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(venv)], check=True)
    cache.mkdir()
    (cache / "weights.bin").write_text("secret")
    for path in (tmp_path, cache, cache / "weights.bin"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    escape = Path("/tmp") / f"escape-{uuid.uuid4().hex}"
    program = (f"open({str(escape)!r}, 'w').write('x')\n"
               f"try:\n    open({str(cache / 'weights.bin')!r}).read()\nexcept OSError:\n    pass\n"
               "else:\n    raise AssertionError('read the model cache')\n")
    # the sandbox's working directory goes under a temporary directory of this test's own (itself under /tmp),
    # so that another test's sandbox, running beside this one, is not counted as left behind
    work = tmp_path / "tmp"
    work.mkdir()
    os.chmod(work, 0o755)
    code = ("import json, os, glob\nfrom celtk.tasks._sandbox import run_untrusted, SandboxLimits\n"
            f"r = run_untrusted({program!r}, SandboxLimits(cpu_seconds=2, wall_seconds=8.0), allow=True)\n"
            f"print(json.dumps([r.passed, r.isolation, sorted(glob.glob({str(work)!r} + '/celtk-sandbox-*')), "
            "r.stderr_tail]))")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CELTK_CACHE": str(cache), "TMPDIR": str(work),
           "PYTHONPATH": os.pathsep.join([str(repo), *(p for p in sys.path if "site-packages" in p)])}
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env)
    passed, mode, leftovers, tail = json.loads(out.stdout.strip().splitlines()[-1])
    assert passed, tail + out.stderr[-1000:]
    assert mode == isolation() and leftovers == [] and not escape.exists()


@needs_namespaces
def test_other_processes_are_out_of_reach():
    """``posix.kill`` and ``ptrace`` find no other process of the sandbox user, and no host command line is readable."""
    token = f"celtk-victim-{uuid.uuid4().hex}"
    victim = sandbox_user_process(token)
    try:
        program = (f"import ctypes, errno, os, posix\nvictim = {victim.pid}\n"
                   "try:\n    posix.kill(victim, 9)\nexcept ProcessLookupError:\n    pass\n"
                   "else:\n    raise AssertionError('killed it')\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "assert libc.ptrace(16, victim, None, None) == -1 and ctypes.get_errno() == errno.ESRCH\n"
                   "for pid in filter(str.isdigit, os.listdir('/proc') if os.path.isdir('/proc') else []):\n"
                   "    try:\n        line = open(f'/proc/{pid}/cmdline', 'rb').read()\n    except OSError:\n"
                   "        continue\n"
                   f"    assert {token.encode()!r} not in line, 'host process visible'\n")
        result = native(program)
        assert result.passed, result.stderr_tail
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


@needs_namespaces
def test_sysv_shared_memory_is_private_and_freed():
    libc = ctypes.CDLL(None, use_errno=True)
    host_key, program_key = (int.from_bytes(os.urandom(3), "big") + 1 for _ in range(2))
    host_segment = libc.shmget(host_key, 4096, 0o1666)  # IPC_CREAT | 0666
    assert host_segment >= 0
    try:
        program = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                   f"assert libc.shmget({host_key}, 0, 0) == -1, 'host segment visible'\n"
                   f"seg = libc.shmget({program_key}, 64 << 20, 0o1600)\nassert seg >= 0\n")
        result = native(program)
        assert result.passed, result.stderr_tail
        keys = [int(line.split()[0]) for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert program_key not in keys and host_key in keys
    finally:
        libc.shmctl(host_segment, 0, None)  # IPC_RMID
        leaked = libc.shmget(program_key, 0, 0)
        if leaked >= 0:
            libc.shmctl(leaked, 0, None)


@needs_namespaces
@pytest.mark.parametrize("ending", ["assert False", "import time\ntime.sleep(60)"])
def test_processes_that_keep_changing_pid_end_with_the_program(ending):
    comm = f"esc{uuid.uuid4().hex[:12]}"
    program = ("import ctypes, os, time\nlibc = ctypes.CDLL(None)\nfor _ in range(6):\n    if os.fork() == 0:\n"
               "        os.setsid()\n        while True:\n"
               f"            libc.prctl(15, {comm.encode()!r}, 0, 0, 0)  # PR_SET_NAME: no /proc in the sandbox\n"
               "            if os.fork() != 0:\n                os._exit(0)\n"
               f"time.sleep(0.5)\n{ending}\n")
    seen: list[int] = []
    watching = threading.Event()

    def watch() -> None:  # the forkers ran (named as the program names them), so the test is not vacuous
        while not watching.is_set():
            seen.extend(host_processes_named(comm))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = native(program, SandboxLimits(cpu_seconds=2, wall_seconds=2.0, memory_bytes=512 << 20))
    finally:
        watching.set()
        watcher.join()
    assert seen, "the forking processes never ran"
    survivors = host_processes_named(comm)
    time.sleep(0.3)  # a survivor would still be forking now
    survivors += host_processes_named(comm)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not result.passed and survivors == []


def test_two_evaluations_at_once_do_not_touch_each_other():
    """A program still running is not killed when another evaluation cleans up, nor is an unrelated process
    of the sandbox user."""
    victim = sandbox_user_process(f"celtk-bystander-{uuid.uuid4().hex}")
    slow = "import time\ntime.sleep(2.0)\nassert sum(range(10)) == 45\n"
    results: dict[str, bool] = {}
    started = threading.Event()

    def evaluate(name: str, program: str) -> None:
        started.set()
        results[name] = run(program, SandboxLimits(cpu_seconds=4, wall_seconds=8.0, memory_bytes=512 << 20)).passed

    try:
        thread = threading.Thread(target=evaluate, args=("slow", slow))
        thread.start()
        started.wait()
        time.sleep(0.5)  # let the slow program start before the quick ones finish and clean up
        quick = [run("assert False").passed, run("import os\nif os.fork() == 0:\n    os._exit(0)\nassert True").passed]
        thread.join()
        assert results == {"slow": True} and quick == [False, True]
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


# --- what the program can see, and the grading token ---

def test_the_program_sees_only_the_interpreter_and_an_empty_directory():
    """Not the project, not other tasks' data, not the home directory or the caches, not /proc: its root
    holds the interpreter's files and an empty /tmp that is its working directory."""
    repo = Path(__file__).resolve().parents[2]
    other_task = repo / "tests" / "fixtures" / "mbpp"
    assert other_task.is_dir()
    interpreter = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    home = [str(p) for p in Path.home().iterdir() if p not in interpreter.parents][:20] \
        if os.access(Path.home(), os.R_OK) else []
    hidden = [str(repo), str(other_task), *home, "/var", "/opt", "/srv", "/home", "/run", "/etc/passwd",
              "/proc/self", "/sys", "/boot"]
    program = ("import os, sys\n"
               "assert os.getcwd() == '/tmp' and os.listdir('.') == [], (os.getcwd(), os.listdir('.'))\n"
               f"visible = [p for p in {hidden!r} if os.path.exists(p)]\n"
               "assert visible == [], visible\n"
               "assert os.path.isfile(sys.executable) and os.path.isdir(os.path.dirname(os.__file__))\n")
    result = run(program)
    if isolation() == "weak":
        assert not result.passed  # documented: the weak mode shares the file system with the host
    else:
        assert result.passed, result.stderr_tail


# A program that finds the pass token in the runner's memory and writes it to every descriptor, then leaves
# before its (failing) tests run: each way Python offers to reach the runner's objects.
_WRITE_ANY = ("def _emit(found):\n    import os\n    for fd in range(3, 64):\n        try:\n"
              "            os.write(fd, found)\n        except OSError:\n            pass\n    os._exit(0)\n"
              "def _look(value):\n    if isinstance(value, str):\n        value = value.encode()\n"
              "    if isinstance(value, bytes) and len(value) == 32 and all(c in b'0123456789abcdef' for c in value):\n"
              "        _emit(value)\n"
              "def _scan_frame(f):\n    while f is not None:\n        for v in list(f.f_locals.values()):\n"
              "            _look(v)\n            for cell in getattr(v, '__closure__', None) or ():\n"
              "                _look(cell.cell_contents)\n                if isinstance(cell.cell_contents, list):\n"
              "                    [_look(x) for x in cell.cell_contents]\n        f = f.f_back\n")
_GC_SCAN = ("import gc\nfor o in gc.get_objects():\n    _look(o)\n"
            "    if callable(o):\n        for c in getattr(o, '__closure__', None) or ():\n"
            "            _look(c.cell_contents)\n            if isinstance(c.cell_contents, list):\n"
            "                [_look(x) for x in c.cell_contents]\n")
# every thread's current frame through the C API (the supervisor's included), for a program that got ctypes
_NATIVE_WALK = ("    _api = ctypes.pythonapi\n    _api.PyInterpreterState_Get.restype = ctypes.c_void_p\n"
                "    _api.PyInterpreterState_ThreadHead.restype = _api.PyThreadState_Next.restype = ctypes.c_void_p\n"
                "    _api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]\n"
                "    _api.PyThreadState_Next.argtypes = [ctypes.c_void_p]\n"
                "    _api.PyThreadState_GetFrame.restype = ctypes.py_object\n"
                "    _api.PyThreadState_GetFrame.argtypes = [ctypes.c_void_p]\n"
                "    _ts = _api.PyInterpreterState_ThreadHead(_api.PyInterpreterState_Get())\n"
                "    while _ts:\n        try:\n            _stacks.append(_api.PyThreadState_GetFrame(_ts))\n"
                "        except ValueError:\n            pass\n        _ts = _api.PyThreadState_Next(_ts)\n")
STEALS = {
    "the runner's frame": "import sys\n_scan_frame(sys._getframe())\n",
    "a traceback's frames": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                            "    _scan_frame(e.__traceback__.tb_frame)\n",
    "a signal handler's frame": "import os, signal\nsignal.signal(signal.SIGUSR1, lambda s, f: _scan_frame(f))\n"
                                "os.kill(os.getpid(), signal.SIGUSR1)\n",
    # a timer whose handler lands in the audit hook's own frame while the program makes audit events: this
    # passed wrong code when the program ran in the main thread with the token in the hook's free variables
    "a timer handler inside the audit hook": "import signal\ndef _h(s, f):\n    while f is not None:\n"
                                             "        for v in list(f.f_locals.values()):\n            _look(v)\n"
                                             "            if isinstance(v, list):\n"
                                             "                [_look(x) for x in v]\n        f = f.f_back\n"
                                             "signal.signal(signal.SIGALRM, _h)\n"
                                             "signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)\n"
                                             "for _ in range(200000):\n    open('/dev/null').close()\n",
    "the garbage collector's objects": _GC_SCAN,
    "the runner's globals, rebound to switch the guard off": "import __main__\n"
                                                            "for _k in ('_REFUSED', '_MODULES', '_FRAMES'):\n"
                                                            "    setattr(__main__, _k, frozenset())\n"
                                                            + _GC_SCAN,
    # builtins a guard might call: str (a stand-in that names ctypes as something else), len, isinstance
    "builtins, replaced to switch the guard off": "import builtins, gc, sys\n_saved = dict(vars(builtins))\n"
                                                  "class _Any(type):\n    def __instancecheck__(cls, value):\n"
                                                  "        return isinstance(value, _saved['str'])\n"
                                                  "class _Str(str, metaclass=_Any):\n    def __new__(cls, *a, **k):\n"
                                                  "        if a[:1] in (('ctypes',), ('_ctypes',)):\n"
                                                  "            return 'harmless'\n"
                                                  "        return _saved['str'](*a, **k)\n"
                                                  "builtins.str, builtins.len = _Str, (lambda *a: 0)\n"
                                                  "_stacks, _objects = [], []\ntry:\n    import ctypes\n"
                                                  "except Exception:\n    ctypes = None\n"
                                                  "builtins.isinstance = lambda *a: False\n"
                                                  "try:\n    _objects = gc.get_objects()\nexcept Exception:\n"
                                                  "    pass\ntry:\n"
                                                  "    _stacks = list(sys._current_frames().values())\n"
                                                  "except Exception:\n    pass\n"
                                                  "vars(builtins).update(_saved)\n"
                                                  "if ctypes is not None:\n" + _NATIVE_WALK
                                                  + "for _f in _stacks:\n    _scan_frame(_f)\n"
                                                  + _GC_SCAN.replace("gc.get_objects()", "_objects"),
    "every thread's frames": "import sys\nfor f in sys._current_frames().values():\n    _scan_frame(f)\n",
    "a trace function": "import sys\nsys.settrace(lambda f, e, a: _scan_frame(f))\nlen([])\n",
    "process memory": "import re\nm = open('/proc/self/mem', 'rb')\nfor line in open('/proc/self/maps'):\n"
                      "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n    try:\n"
                      "        m.seek(lo)\n        for t in re.findall(rb'(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])', "
                      "m.read(hi - lo)):\n"
                      "            _look(t)\n    except (OSError, ValueError, OverflowError):\n        pass\n",
}


@pytest.mark.parametrize("how", sorted(STEALS))
def test_the_pass_token_is_out_of_the_programs_reach(how):
    """Wrong code that steals the runner's token and leaves before its tests would pass if it found it."""
    program = _WRITE_ANY + STEALS[how] + WRONG + TESTS
    result = run(program)
    assert not result.passed, how


@pytest.mark.parametrize("name,program,refusal", [
    ("ctypes", "import ctypes", "import of ctypes"),
    ("ctypes' core", "import _ctypes", "import of _ctypes"),
    ("a new interpreter", "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'pass'])", "os.exec"),
    ("subprocess", "import subprocess\nsubprocess.run(['true'])", "import of _posixsubprocess"),
    ("posix_spawn", "import os\nos.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
    ("bytecode", "import marshal\nmarshal.loads(marshal.dumps(compile('1', 'x', 'eval')))", "marshal.loads"),
    ("a code object", "(lambda: 0).__code__.replace(co_consts=(1,))", "code.__new__"),
])
def test_the_guard_refuses_native_code_and_unguarded_processes(name, program, refusal):
    """What would read memory, or run code the guard does not see, is refused, and the refusal named."""
    result = run(program)
    assert not result.passed and refusal in result.stderr_tail, (name, result.stderr_tail)


def test_a_program_cannot_add_an_audit_hook_of_its_own():
    """Python drops a hook whose addition an earlier hook refuses: the program's hook never sees an event
    (it would see the guard's own frame lookup, and the frames that carries)."""
    program = ("import sys\ngot = []\nsys.addaudithook(lambda e, a: got.append(e))\nopen('x', 'w').close()\n"
               "assert got == [], got")
    assert run(program).passed


def test_the_guard_leaves_ordinary_programs_alone():
    """What model-written solutions use still works under the guard: imports compiled from source,
    namedtuples and enums (which ask for the caller's frame and take its refusal), logging, dataclasses,
    threads, forks, temporary files, exceptions caught and inspected for their message."""
    program = ("import collections, dataclasses, enum, heapq, itertools, json, logging, math, re, tempfile, threading, "
               "typing\n"
               "P = collections.namedtuple('P', 'a b')\nassert P(1, 2).b == 2\nE = enum.Enum('E', 'A B')\n"
               "assert E.B.value == 2\n"
               "class N(typing.NamedTuple):\n    x: int\nassert N(3).x == 3\n"
               "@dataclasses.dataclass\nclass D:\n    y: int\nassert D(4).y == 4\nlogging.getLogger('x').warning('w')\n"
               "out = []\nt = threading.Thread(target=lambda: out.append(1))\nt.start()\nt.join()\nassert out == [1]\n"
               "with tempfile.TemporaryDirectory() as d:\n    open(d + '/f', 'w').write('x')\n"
               "try:\n    int('z')\nexcept ValueError as e:\n    assert 'z' in str(e)\n"
               "assert heapq.nsmallest(2, [3, 1, 2]) == [1, 2] and math.isqrt(17) == 4\n")
    result = run(program, SandboxLimits(cpu_seconds=4, wall_seconds=8.0, memory_bytes=512 << 20))
    assert result.passed, result.stderr_tail


def test_tools_are_found_by_absolute_path(tmp_path, monkeypatch):
    """Executables named like the sandbox's tools earlier on PATH are never run, and the isolation
    (and what it hides) stays what the system's own tools give."""
    fake = tmp_path / "bin"
    fake.mkdir()
    ran = tmp_path / "ran"
    for name in sandbox.TOOLS + ("mktemp", "chown", "python3"):
        (fake / name).write_text(f"#!/bin/sh\necho {name} >> {ran}\nexit 1\n")
        (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    sandbox.tools.cache_clear()
    sandbox._probe.cache_clear()
    try:
        assert all(path.startswith(sandbox.TOOL_DIRS) for path in sandbox.tools().values())
        mode = isolation()
        assert mode == ("root-namespaces" if ROOT else mode)
        secret = tmp_path / "secret.txt"
        secret.write_text("key")
        os.chmod(secret, 0o644)
        os.chmod(tmp_path, 0o755)
        assert run("assert True").passed
        assert not run(f"print(open({str(secret)!r}).read())").passed
        assert not ran.exists(), ran.read_text()
    finally:
        sandbox.tools.cache_clear()
        sandbox._probe.cache_clear()


def test_missing_tools_are_named_with_where_they_were_looked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "TOOL_DIRS", (str(tmp_path),))
    monkeypatch.delenv("CELTK_ALLOW_WEAK_SANDBOX", raising=False)
    sandbox.tools.cache_clear()
    sandbox._probe.cache_clear()
    try:
        with pytest.raises(SandboxRefusedError, match=rf"no unshare, setpriv, .* in {tmp_path}"):
            run_untrusted("assert True", FAST, allow=True)
    finally:
        sandbox.tools.cache_clear()
        sandbox._probe.cache_clear()


def _failing_setup(monkeypatch, marker: Path, times: int) -> None:
    """The child's limit-setting (before exec) raises its first ``times`` times: a file counts the failures,
    since each attempt is a fresh fork."""
    real = sandbox._preexec

    def preexec(*args: Any, **kwargs: Any) -> Any:
        apply = real(*args, **kwargs)

        def flaky() -> None:
            failed = len(marker.read_text()) if marker.exists() else 0
            if failed < times:
                marker.write_text("x" * (failed + 1))
                raise OSError("simulated setup failure")
            apply()

        return flaky

    monkeypatch.setattr(sandbox, "_preexec", preexec)


def test_a_child_that_fails_before_exec_is_started_again(monkeypatch, tmp_path):
    """A child that fails while it sets its limits ran none of the program: it is started again, and the program's
    verdict is the one a first start would give."""
    marker = tmp_path / "failures"
    _failing_setup(monkeypatch, marker, times=sandbox.SPAWN_ATTEMPTS - 1)
    assert run("assert 1 + 1 == 2").passed
    assert marker.read_text() == "x" * (sandbox.SPAWN_ATTEMPTS - 1)


def test_a_child_that_never_starts_is_an_error_naming_the_failed_step(monkeypatch, tmp_path):
    _failing_setup(monkeypatch, tmp_path / "failures", times=sandbox.SPAWN_ATTEMPTS)
    with pytest.raises(SandboxRefusedError, match="simulated setup failure.*3 times; the program was not run"):
        run("assert True")


def test_the_code_between_fork_and_exec_runs_no_type_check_wrapper():
    """Under pytest the jaxtyping import hook wraps every celtk function in a runtime type check. The child's setup
    runs after fork and before exec, partly after ``RLIMIT_AS`` caps its address space: a wrapper there runs Python
    that allocates, and failed the child now and then on a loaded machine. The setup functions, and the closures they
    return, must stay unwrapped."""
    if not hasattr(sandbox._own_process_count, "__wrapped__"):
        pytest.skip("the jaxtyping import hook is not active in this session")
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=1.0)
    for function in (sandbox._preexec, sandbox._reporting, sandbox._preexec(limits, None, [], False),
                     sandbox._reporting(lambda: None)):
        assert not hasattr(function, "__wrapped__"), function
