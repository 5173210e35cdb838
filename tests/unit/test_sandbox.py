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


def sandbox_user_process(token: str) -> subprocess.Popen:
    """A process unrelated to any sandbox, of the user sandboxed programs run as, with ``token`` in its command line."""
    kwargs = {"user": 65534, "group": 65534, "extra_groups": []} if ROOT else {}
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
TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0\n"


@pytest.mark.parametrize("name,bypass", [
    ("sys.exit(0)", "import sys\nsys.exit(0)\n"),
    ("raise SystemExit", "raise SystemExit\n"),
    ("raise SystemExit(0)", "raise SystemExit(0)\n"),
    ("os._exit(0)", "import os\nos._exit(0)\n"),
    ("atexit hook", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
    ("atexit sys.exit", "import atexit, sys\natexit.register(sys.exit, 0)\n"),
    ("thread os._exit", "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n"),
    ("marker on every fd", "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'PASS\\n0' * 8)\n"
                           "    except OSError:\n        pass\n"),
    ("exit status of a forked child", "import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\n"),
])
def test_wrong_code_with_an_exit_trick_fails(name, bypass):
    assert run(WRONG + TESTS + "\n").passed is False  # control: the code is wrong
    assert not run(WRONG + bypass + TESTS).passed, name  # trick before the tests run
    assert not run(bypass + WRONG + TESTS).passed, name  # trick armed, then the tests fail


def test_correct_code_passes_whatever_it_leaves_behind():
    right = "def add(a, b):\n    return a + b\n"
    assert run(right + TESTS).passed
    assert run(right + "import atexit, os\natexit.register(lambda: os._exit(3))\n" + TESTS).passed  # hooks never run
    assert run(right + "print('noise')\nimport sys\nsys.stderr.write('x' * 100000)\n" + TESTS).passed


def test_main_guard_does_not_run_as_in_code_eval():
    """code_eval execs the program in fresh globals, so ``__name__`` is not ``"__main__"`` there either."""
    assert run("def f():\n    return 1\nif __name__ == '__main__':\n    assert False\nassert f() == 1").passed


def test_a_program_may_signal_itself():
    program = ("import os, signal\ngot = []\nsignal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
               "os.kill(os.getpid(), signal.SIGUSR1)\nassert got == [1]")
    assert run(program).passed


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
    program = ("import os, signal\ngot = []\nsignal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
               "os.kill(os.getpid(), signal.SIGUSR1)\nassert got == [1]\n"
               "try:\n    os.kill(1, 0)\nexcept PermissionError:\n    pass\nelse:\n    raise AssertionError('guard')")
    result = run(program)
    assert result.isolation == "weak" and result.passed, result.stderr_tail


# --- resource limits ---

@pytest.mark.parametrize("name,program", [
    ("infinite loop", "while True:\n    pass"),
    ("sleep past wall time", "import time\ntime.sleep(60)"),
    ("memory bomb", "x = bytearray(4 << 30)\nassert False"),
    ("fork bomb", "import os\nwhile True:\n    os.fork()"),
    ("socket", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)"),
    ("raw socket module", "import _socket\ns = _socket.socket()\ns.connect(('1.1.1.1', 80))"),
    ("kill parent", f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\nassert False"),
])
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
    code = ("import json, os, glob\nfrom celtk.tasks._sandbox import run_untrusted, SandboxLimits\n"
            "before = set(glob.glob('/tmp/celtk-sandbox-*'))\n"
            f"r = run_untrusted({program!r}, SandboxLimits(cpu_seconds=2, wall_seconds=8.0), allow=True)\n"
            "print(json.dumps([r.passed, r.isolation, sorted(set(glob.glob('/tmp/celtk-sandbox-*')) - before), r.stderr_tail]))")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CELTK_CACHE": str(cache),
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
                   "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                   "    try:\n        line = open(f'/proc/{pid}/cmdline', 'rb').read()\n    except OSError:\n        continue\n"
                   f"    assert {token.encode()!r} not in line, 'host process visible'\n")
        result = run(program)
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
        result = run(program)
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
    program = ("import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
               f"            open('/proc/self/comm', 'w').write({comm!r})\n"
               "            if os.fork() != 0:\n                os._exit(0)\n"
               f"time.sleep(0.5)\n{ending}\n")
    result = run(program, SandboxLimits(cpu_seconds=2, wall_seconds=2.0, memory_bytes=512 << 20))
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
