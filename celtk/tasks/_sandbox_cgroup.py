"""A cgroup per sandboxed program: one memory and process budget for the program with all its children.

Made as a child of celtk's own cgroup (so the machine's accounting still covers it), when the
cgroup file system lets us write there: cgroup v1 (``memory`` and ``pids`` hierarchies) or a
v2 hierarchy mounted at ``/sys/fs/cgroup``. Where it does not (an unprivileged user, most
containers), :func:`make_cgroup` returns None and the sandbox falls back to per-process limits.
"""

from __future__ import annotations

import os
import signal
import uuid
from dataclasses import dataclass

_ROOT = "/sys/fs/cgroup"


def _own_paths() -> dict[str, str]:
    """Controller name (``""`` for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else [""]:
                    paths[name] = path
    except (OSError, ValueError):
        return {}
    return paths


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


@dataclass
class ProgramCgroup:
    """The cgroup directories (one per hierarchy) that hold one program."""

    dirs: list[str]
    version: int

    def join_fds(self) -> list[int]:
        """Open ``cgroup.procs`` of each directory; the child writes its pid there before exec."""
        return [os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY) for d in self.dirs]

    def members(self) -> set[int]:
        pids: set[int] = set()
        for d in self.dirs:
            try:
                with open(os.path.join(d, "cgroup.procs")) as handle:
                    pids.update(int(line) for line in handle if line.strip())
            except OSError:
                continue
        return pids

    def memory_exceeded(self) -> bool:
        """Whether the kernel refused the program memory or killed one of its processes for it."""
        for d in self.dirs:
            for name in ("memory.failcnt", "memory.memsw.failcnt", "memory.oom_control", "memory.events"):
                try:
                    with open(os.path.join(d, name)) as handle:
                        fields = [line.split() for line in handle if line.strip()]
                except OSError:
                    continue
                counts = [int(f[-1]) for f in fields if name.endswith("failcnt") or f[0] in ("max", "oom_kill")]
                if any(counts):
                    return True
        return False

    def remove(self) -> None:
        """Kill whatever is still inside (by cgroup membership, never by user) and remove the directories."""
        for _ in range(100):
            pids = self.members()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass


def make_cgroup(memory_bytes: int, max_processes: int) -> ProgramCgroup | None:
    """A fresh cgroup limiting memory (without swap) and process count, or None where we cannot make one."""
    own = _own_paths()
    name = f"celtk-sandbox-{uuid.uuid4().hex[:12]}"
    made: list[str] = []
    try:
        if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")) and "" in own:  # v2
            d = os.path.join(_ROOT, own[""].lstrip("/"), name)
            os.mkdir(d)
            made.append(d)
            _write(os.path.join(d, "memory.max"), str(memory_bytes))
            _write(os.path.join(d, "pids.max"), str(max_processes))
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), "0")
            return ProgramCgroup(made, 2)
        if "memory" not in own or "pids" not in own:
            return None
        memory = os.path.join(_ROOT, "memory", own["memory"].lstrip("/"), name)
        pids = os.path.join(_ROOT, "pids", own["pids"].lstrip("/"), name)
        os.mkdir(memory)
        made.append(memory)
        os.mkdir(pids)
        made.append(pids)
        _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
        if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):  # memory + swap, so swap is no way out
            _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(memory_bytes))
        _write(os.path.join(pids, "pids.max"), str(max_processes))
        return ProgramCgroup(made, 1)
    except OSError:
        ProgramCgroup(made, 0).remove()
        return None
