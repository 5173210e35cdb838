"""The ``celtk`` command line. Verbs import heavy libraries inside their bodies, so
``celtk --help`` is instant; library errors are shown as one line, without a traceback."""

from __future__ import annotations

import errno
import json
import os
import sys
from datetime import datetime, timezone
from typing import IO

import click

from celtk._version import __version__

# Failures to write an output (a full disk, a read-only directory): the user's to fix, so one line. A closed pipe
# (`celtk … | head`) is click's to end quietly.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


class Failure(click.ClickException):
    """An error as the command line shows it: ``Error: message`` on stderr, or under ``--log-format json``
    one JSON object (``time``, ``level``, ``error``, ``message``), as the progress lines are."""

    def __init__(self, message: str, kind: str, json_lines: bool, exit_code: int = 1) -> None:
        super().__init__(message)
        self.kind, self.json_lines = kind, json_lines
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it per class; a usage error keeps its 2

    def show(self, file: IO[str] | None = None) -> None:
        if not self.json_lines:
            return super().show(file)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        sys.stderr.write(json.dumps({"time": stamp, "level": "error", "error": self.kind,
                                     "message": self.format_message()}, ensure_ascii=False) + "\n")
        sys.stderr.flush()


def _json_errors(ctx: click.Context) -> bool:
    settings = ctx.meta.get("celtk.progress")
    chosen = settings.log_format if settings is not None else os.environ.get("CELTK_LOG_FORMAT", "text")
    return chosen == "json"


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        from celtk.errors import CeltkError

        try:
            return super().invoke(ctx)
        except CeltkError as error:
            raise Failure(str(error), type(error).__name__, _json_errors(ctx)) from None
        except OSError as error:
            if error.errno not in _WRITE_ERRNOS:
                raise
            if not error.filename:
                raise _stdout_failure(error, _json_errors(ctx)) from None
            raise Failure(f"celtk could not write {error.filename}: {error.strerror}. Free space or write "
                          "elsewhere, then rerun the command (finished stages are kept).", "OSError",
                          _json_errors(ctx)) from None
        except click.ClickException as error:  # a verb's own usage error
            if isinstance(error, Failure) or not _json_errors(ctx):
                raise
            raise Failure(error.format_message(), type(error).__name__, True, error.exit_code) from None


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="celtk")
@click.option("--quiet", "-q", is_flag=True, default=False, envvar="CELTK_QUIET", show_envvar=True,
              help="No progress output (results and errors still print).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="CELTK_LOG_FORMAT", show_envvar=True,
              help="Progress: text = rich bars on a terminal, plain lines to stderr elsewhere (a log file, a Slurm "
                   "output); json = one JSON object per line to stderr, anywhere, errors included.")
@click.option("--progress-every", type=click.FloatRange(min=0), default=30.0, show_default=True, metavar="SECONDS",
              envvar="CELTK_PROGRESS_EVERY", show_envvar=True,
              help="Off a terminal: at most one progress line per stage this often (plus each stage's first and "
                   "last).")
@click.pass_context
def main(ctx: click.Context, quiet: bool, log_format: str, progress_every: float) -> None:
    """celtk — find attention heads whose removal improves a model on a task (Capability
    Enhancement Localization), prove the gain on held-out data, and explain it.

    Its options come before the verb (`celtk --log-format json screen …`) and apply to every verb;
    in a batch script the environment variables named below do the same."""
    from celtk.cli._common import ProgressSettings

    ctx.meta["celtk.progress"] = ProgressSettings(quiet=quiet, log_format=log_format, every=progress_every)
    ctx.call_on_close(lambda: _flush_stdout(ctx))


def _flush_stdout(ctx: click.Context) -> None:
    """Flush what the verb printed while an error can still be shown: a full device would otherwise end the
    process in Python's own "Exception ignored … OSError" traceback at shutdown."""
    try:
        sys.stdout.flush()
    except OSError as error:
        raise _stdout_failure(error, _json_errors(ctx)) from None


def _stdout_failure(error: OSError, json_lines: bool) -> Failure:
    """The error for standard output that cannot be written; standard output goes to /dev/null after it,
    since the interpreter flushes it once more at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured output)
        pass
    return Failure(f"celtk could not write its output (standard output): {error.strerror}. Free space or write "
                   "elsewhere, then rerun the command (finished stages are kept).", "OSError", json_lines)


def run() -> None:
    """The ``celtk`` executable: keeps freed memory for reuse (process-wide, so here and not in
    :func:`main`, which tests invoke in their own process), then runs the command line."""
    from celtk.cli.allocator import keep_freed_memory

    keep_freed_memory()  # CPU decoding refaults freed tensors' pages otherwise (see celtk.cli.allocator)
    try:
        main()
    except OSError as error:  # written before any verb ran (--version, --help) to a full device
        if error.errno not in _WRITE_ERRNOS:
            raise
        _stdout_failure(error, os.environ.get("CELTK_LOG_FORMAT") == "json").show()
        raise SystemExit(1) from None


def _register() -> None:
    from celtk.cli import analysis_cmds, eval_cmd, info, pipeline_cmds, search_cmds, theory_cmd, transfer_cmd

    for module in (info, eval_cmd, pipeline_cmds, search_cmds, analysis_cmds, theory_cmd, transfer_cmd):
        for command in module.COMMANDS:
            main.add_command(command)
    main.add_command(__import__("celtk.cli.plan_cmd", fromlist=["plan_cmd"]).plan_cmd)  # celtk plan


_register()
