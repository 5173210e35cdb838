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


def test_cannot_write_outside_sandbox(tmp_path):
    target = Path.cwd() / f"escape-{uuid.uuid4().hex}.txt"  # the user's project directory
    program = f"open({str(target)!r}, 'w').write('escaped')"
    assert not run_untrusted(program, FAST, allow=True).passed
    assert not target.exists()
