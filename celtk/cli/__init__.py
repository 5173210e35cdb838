"""The ``celtk`` command line. Verbs import heavy libraries inside their bodies, so
``celtk --help`` is instant; library errors are shown as one line, without a traceback."""

from __future__ import annotations

import click

from celtk import __version__


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        from celtk.errors import CeltkError

        try:
            return super().invoke(ctx)
        except CeltkError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="celtk")
def main() -> None:
    """celtk — find attention heads whose removal improves a model on a task (Capability
    Enhancement Localization), prove the gain on held-out data, and explain it."""


def run() -> None:
    """The ``celtk`` executable: keeps freed memory for reuse (process-wide, so here and not in
    :func:`main`, which tests invoke in their own process), then runs the command line."""
    from celtk.allocator import keep_freed_memory

    keep_freed_memory()  # CPU decoding refaults freed tensors' pages otherwise (see celtk.allocator)
    main()


def _register() -> None:
    from celtk.cli import analysis_cmds, eval_cmd, info, pipeline_cmds, search_cmds, theory_cmd, transfer_cmd

    for module in (info, eval_cmd, pipeline_cmds, search_cmds, analysis_cmds, theory_cmd, transfer_cmd):
        for command in module.COMMANDS:
            main.add_command(command)
    main.add_command(__import__("celtk.cli.plan_cmd", fromlist=["plan_cmd"]).plan_cmd)  # celtk plan


_register()
