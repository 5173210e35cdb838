"""The ``celtk`` command line. Verbs import heavy libraries inside their bodies, so
``celtk --help`` is instant; library errors are shown as one line, without a traceback."""

from __future__ import annotations

import click

from celtk._version import __version__


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        from celtk.errors import CeltkError

        try:
            return super().invoke(ctx)
        except CeltkError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="celtk")
@click.option("--quiet", "-q", is_flag=True, default=False, envvar="CELTK_QUIET", show_envvar=True,
              help="No progress output (results and errors still print).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="CELTK_LOG_FORMAT", show_envvar=True,
              help="Progress: text = rich bars on a terminal, plain lines to stderr elsewhere (a log file, a Slurm "
                   "output); json = one JSON object per line to stderr, anywhere.")
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


def run() -> None:
    """The ``celtk`` executable: keeps freed memory for reuse (process-wide, so here and not in
    :func:`main`, which tests invoke in their own process), then runs the command line."""
    from celtk.cli.allocator import keep_freed_memory

    keep_freed_memory()  # CPU decoding refaults freed tensors' pages otherwise (see celtk.cli.allocator)
    main()


def _register() -> None:
    from celtk.cli import analysis_cmds, eval_cmd, info, pipeline_cmds, search_cmds, theory_cmd, transfer_cmd

    for module in (info, eval_cmd, pipeline_cmds, search_cmds, analysis_cmds, theory_cmd, transfer_cmd):
        for command in module.COMMANDS:
            main.add_command(command)
    main.add_command(__import__("celtk.cli.plan_cmd", fromlist=["plan_cmd"]).plan_cmd)  # celtk plan


_register()
