"""A real one-node Slurm for the tests: munged, slurmctld and slurmd started as child processes with
a slurm.conf for this host, every state, spool and log file under one temporary directory.

Needs root (slurmd runs jobs as their submitting user) and Debian's ``slurm-wlm`` and ``munge``
(``apt-get install slurm-wlm munge``; `.ci/run` installs them). No systemd, no cgroups:
``proctrack/linuxproc`` follows a job's processes by parentage and ``task/none`` binds nothing.
There is no slurmdbd, so ``sacct`` reads the job-completion log (``JobCompType=jobcomp/filetxt``,
``sacct --completion``): it has the final state of every job and of every requeued attempt, not
the states of jobs still pending or running, which ``squeue`` shows.

The node declares more CPUs and memory than this machine has (``SlurmdParameters=config_overrides``)
so that six shards asking the scripts' ``--cpus-per-task=8 --mem=64G`` run at once: Slurm only
counts them, nothing enforces them without cgroups. It declares no GPU, so jobs are submitted with
``--gres=none`` in place of the scripts' ``--gres=gpu:1``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "sacct", "scancel")
NODE = "celtk-node"


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)),
                                      None)


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (always, also after a failed start)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "log" / "jobcomp.txt"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        if os.geteuid() != 0:
            raise SlurmUnavailable(f"not root (uid {os.geteuid()}): slurmd must run as root to start jobs")
        missing = [name for name in DAEMONS if _find(name) is None]
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not installed (Debian: apt-get install slurm-wlm munge)")
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.chmod(0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = munge / "munge.socket"
        self._spawn("munged", [_find("munged"), "--foreground", "--force", f"--socket={socket_path}",
                               f"--key-file={key}", f"--log-file={munge / 'munged.log'}",
                               f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}"])
        self._wait(lambda: socket_path.exists(), 15, "munged did not create its socket")
        self.conf.write_text(self._config(socket_path))
        self._spawn("slurmctld", [_find("slurmctld"), "-D", "-f", str(self.conf)])
        self._spawn("slurmd", [_find("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait(lambda: self.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], check=False).stdout.strip() == "idle",
                   timeout, "the node did not become idle")

    def _config(self, socket_path: Path) -> str:
        host = socket.gethostname().split(".")[0]
        r = self.root
        return f"""\
ClusterName=celtk-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
DefMemPerCPU=1000
KillWait=2
MinJobAge=3600
InactiveLimit=0
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=64 RealMemory=524288 State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, name: str, argv: list) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "wb")
        self.procs[name] = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            stdin=subprocess.DEVNULL)
        log.close()

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise SlurmUnavailable(f"{', '.join(dead)} exited at start; {self.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"{what} within {timeout:.0f} s; {self.log_tail()}")

    def log_tail(self, lines: int = 6) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if path.is_file() and path != self.jobcomp:
                tail = [l for l in path.read_text(errors="replace").splitlines() if "pmix" not in l][-lines:]
                parts.append(f"{path.name}: " + " | ".join(tail))
        return "; ".join(parts)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, and end any process still running under this cluster."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--user", "root"], check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.run(["squeue", "-h"], check=False).stdout.strip():
                time.sleep(0.5)
            self.run(["scontrol", "shutdown"], check=False)
        for name in ("slurmd", "slurmctld", "munged"):  # the first two end on `scontrol shutdown`, munged on SIGTERM
            proc = self.procs.get(name)
            if proc is None:
                continue
            if name == "munged":
                proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for pid in self.stray_pids():  # slurmstepd and job processes detach from slurmd; they carry our SLURM_CONF
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stray_pids(self) -> list[int]:
        mark = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mark in (entry / "environ").read_bytes().split(b"\0"):
                        pids.append(int(entry.name))
                except OSError:
                    pass
        return pids

    # -- commands ----------------------------------------------------------------------------

    def run(self, argv: list, check: bool = True, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd,
                              env={**self.env, **(env or {})}, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def tasks(self, job: str) -> dict[str, dict[str, str]]:
        """``scontrol show job``'s fields per job (array tasks as ``ID_i``), while the controller still holds it."""
        out = self.run(["scontrol", "show", "job", "-o", job]).stdout
        jobs = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            key = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}" if fields.get("ArrayTaskId") else fields["JobId"]
            jobs[key] = fields
        return jobs

    def state(self, job: str) -> str:
        return self.tasks(job)[job]["JobState"]

    def wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.5)
        raise AssertionError(f"{what} within {timeout:.0f} s; queue: {self.run(['squeue'], check=False).stdout}")

    def sacct(self) -> list[tuple[str, str, str]]:
        """``sacct --completion``: (JobID as Slurm numbers it, job name, state), one row per finished attempt."""
        out = self.run(["sacct", "--completion", "-n", "-P", "-o", "JobID,JobName,State"]).stdout
        return [tuple(line.split("|")) for line in out.splitlines() if line.count("|") == 2]
