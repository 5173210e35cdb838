"""Model-written code fails safely in the sandbox, and evaluation goes on."""

import os
import uuid
from pathlib import Path

import pytest

from celtk.errors import SandboxRefusedError
from celtk.tasks._sandbox import SandboxLimits, run_untrusted

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=4.0, memory_bytes=512 << 20)


def test_refused_without_opt_in(monkeypatch):
    monkeypatch.delenv("CELTK_ALLOW_CODE_EXEC", raising=False)
    with pytest.raises(SandboxRefusedError, match="CELTK_ALLOW_CODE_EXEC=1"):
        run_untrusted("print(1)")


def test_env_opt_in(monkeypatch):
    monkeypatch.setenv("CELTK_ALLOW_CODE_EXEC", "1")
    assert run_untrusted("assert 1 + 1 == 2", FAST).passed


def test_failing_assert_fails():
    assert not run_untrusted("assert 1 == 2", FAST, allow=True).passed


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
    result = run_untrusted(program, FAST, allow=True)
    assert not result.passed, name
    assert run_untrusted("assert True", FAST, allow=True).passed  # and evaluation continues


@pytest.mark.parametrize("where", ["project", "tmp", "var_tmp", "dev_shm", "home"])
def test_cannot_write_outside_sandbox(where):
    base = {"project": Path.cwd(), "tmp": Path("/tmp"), "var_tmp": Path("/var/tmp"), "dev_shm": Path("/dev/shm"),
            "home": Path.home()}[where]
    if not base.is_dir():
        pytest.skip(f"{base} does not exist here")
    target = base / f"escape-{uuid.uuid4().hex}.txt"
    program = f"open({str(target)!r}, 'w').write('escaped')\nimport os\nos.sync()"
    result = run_untrusted(program, FAST, allow=True)
    assert not target.exists()
    if where == "project":  # not writable by the sandbox user at all
        assert not result.passed


def test_cannot_read_the_users_temporary_files(tmp_path):
    secret = tmp_path / "secret.txt"  # under the user's /tmp
    secret.write_text("key")
    os.chmod(secret, 0o644)
    os.chmod(tmp_path, 0o755)
    assert not run_untrusted(f"print(open({str(secret)!r}).read())", FAST, allow=True).passed


def test_own_working_directory_is_writable():
    program = "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'"
    assert run_untrusted(program, FAST, allow=True).passed


def test_works_when_the_environment_lives_under_tmp(tmp_path):
    """CI may clone (and build .venv) under /tmp, which the sandbox hides: it must still run."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    repo = Path(__file__).resolve().parents[2]
    code = ("from celtk.tasks._sandbox import run_untrusted, SandboxLimits\n"
            "r = run_untrusted('assert 1 + 1 == 2', SandboxLimits(cpu_seconds=2, wall_seconds=8.0), allow=True)\n"
            "print(r.passed, r.stderr_tail)")
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.pathsep.join(p for p in sys.path if 'site-packages' in p)}"}
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.startswith("True"), out.stdout + out.stderr[-1000:]
