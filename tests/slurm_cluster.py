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

A requeued job is held back by Slurm itself until its new launch credential postdates the one the
requeue revoked (``begin_time = requeue + cred_expire + 1``; slurmd refuses a credential created in
the second of the revocation or before it, ``Job credential revoked``, and the job then ends FAILED
with exit code 1). The tests never cut that hold short (``scontrol update StartTime=now`` right
after a requeue is exactly that race); they shorten it the way Slurm allows, ``cred_expire=10``
(Slurm's minimum is 5; the default 120 s would hold the requeued shard two minutes), and
``sched_interval=2`` lets the main scheduling loop start the job within 2 s of its hold ending (the
default loop runs once a minute). The prolog (``PROLOG``) holds a job before its batch script
starts while its working directory has a ``hold-prolog`` file, so that a test can requeue a job
that is launching; every other job passes it at once. slurmd logs at ``debug`` so that its log says
when it revoked a job's credentials (``credential for job N revoked``).

When a wait fails, :meth:`report` says why: the jobs' ``scontrol`` lines, their ``.out`` files and
the controller's and slurmd's log lines that name them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "sacct", "scancel")
NODE = "celtk-node"
CRED_EXPIRE = 10  # seconds; a requeued job may start CRED_EXPIRE + 1 s after its requeue (Slurm's own hold)
HOLD_FILE = "hold-prolog"  # in a job's working directory: the prolog waits while it exists
PROLOG = f"""\
#!/bin/sh
# celtk test cluster: a job whose working directory holds {HOLD_FILE} waits here, before its batch
# script starts, until the test removes that file (at most 300 s); it first writes in-prolog-JOBID
# there. Every other job passes at once.
[ -n "$SLURM_JOB_WORK_DIR" ] && [ -e "$SLURM_JOB_WORK_DIR/{HOLD_FILE}" ] || exit 0
: > "$SLURM_JOB_WORK_DIR/in-prolog-$SLURM_JOB_ID"
n=0
while [ -e "$SLURM_JOB_WORK_DIR/{HOLD_FILE}" ] && [ "$n" -lt 1500 ]; do sleep 0.2; n=$((n + 1)); done
exit 0
"""
# the ids a controller or slurmd log line names: JobId=12, JobId=12_3(15), JobId=12_*, job 15, [15.batch]
_CTLD_IDS = re.compile(r"JobId=(\d+)(?:_(?:\d+|\*|\[[^\]]*\]))?(?:\((\d+)\))?")
_SLURMD_IDS = re.compile(r"(?:JobId=|\b[Jj]ob |\[)(\d+)")
_STEP_DEBUG = re.compile(r"\] \[\d+\.\w+\] debug")  # slurmstepd's debug chatter, left out of a report
_SHOWN = {"JobId", "ArrayJobId", "ArrayTaskId", "JobName", "JobState", "Reason", "Dependency", "Restarts", "ExitCode",
          "SubmitTime", "StartTime", "EndTime", "WorkDir"}


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
        prolog = self.root / "prolog.sh"
        prolog.write_text(PROLOG)
        prolog.chmod(0o755)
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
AuthInfo=socket={socket_path},cred_expire={CRED_EXPIRE}
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
Prolog={r / 'prolog.sh'}
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

    def wait_for(self, ready, timeout: float, what: str, jobs=(), dirs=(), broken=None) -> None:
        """Poll ``ready()`` until it is true. Fails at ``timeout``, or at once when ``broken()`` returns a
        reason (a state the wait can no longer leave); the message ends with :meth:`report` on ``jobs``
        (ids as Slurm prints them) and the ``.out`` files in ``dirs``."""
        deadline = time.monotonic() + timeout
        while True:
            if ready():
                return
            why = broken() if broken is not None else None
            if why:
                raise AssertionError(f"{what}: {why}\n{self.report(jobs, dirs)}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} within {timeout:.0f} s\n{self.report(jobs, dirs)}")
            time.sleep(0.5)

    def report(self, jobs=(), dirs=(), lines: int = 60) -> str:
        """The queue; ``scontrol``'s line for each of ``jobs`` and their array tasks; the ``.out`` files in
        ``dirs`` (their last ``lines`` lines); slurmctld's and slurmd's log lines naming those jobs."""
        parts = ["squeue:\n" + self.run(["squeue", "-o", "%i %j %T %r"], check=False).stdout.rstrip()]
        ids = set()
        for job in jobs:
            out = self.run(["scontrol", "show", "job", "-o", str(job)], check=False)
            shown = [" ".join(f for f in line.split() if f.split("=", 1)[0] in _SHOWN)
                     for line in out.stdout.splitlines()]
            parts.append(f"scontrol show job {job}:\n" + ("\n".join(shown) or out.stderr.rstrip()))
            ids.add(str(job).split("_")[0])
            ids.update(re.findall(r"\bJobId=(\d+)", out.stdout))
        for d in dirs:
            for path in sorted(Path(d).glob("*.out")):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"{path} (last {len(tail)} lines):\n" + "\n".join(tail))
        for name, pattern in (("slurmctld.log", _CTLD_IDS), ("slurmd.log", _SLURMD_IDS)):
            path = self.root / "log" / name
            text = path.read_text(errors="replace") if path.is_file() else ""
            named = [line for line in text.splitlines() if not _STEP_DEBUG.search(line)
                     and any(i in ids for m in pattern.finditer(line) for i in m.groups() if i)]
            parts.append(f"{name}, lines naming jobs {sorted(ids, key=int)} (last {lines}):\n"
                         + "\n".join(named[-lines:]))
        return "\n\n".join(parts)

    def log_lines(self, name: str, needle: str) -> list[str]:
        """The lines of log/NAME (slurmctld.log, slurmd.log) that contain ``needle``."""
        path = self.root / "log" / name
        return [line for line in path.read_text(errors="replace").splitlines() if needle in line]

    def sacct(self) -> list[tuple[str, str, str]]:
        """``sacct --completion``: (JobID as Slurm numbers it, job name, state), one row per finished attempt."""
        out = self.run(["sacct", "--completion", "-n", "-P", "-o", "JobID,JobName,State"]).stdout
        return [tuple(line.split("|")) for line in out.splitlines() if line.count("|") == 2]
