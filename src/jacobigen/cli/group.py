"""The ``jacobigen`` command group: every error becomes one line, unless ``--debug``.

Arguments are checked before torch is imported and before a model loads, and output paths before
any image exists: a bad input is one line naming it and its limit (exit 2); a failure while
running is one line too (exit 1); ``jacobigen --debug ...`` shows the traceback instead.
"""

from __future__ import annotations

import re
import warnings

import click

from ..core.errors import ConfigError, JacobigenError, PromptWarning


class BadInput(click.ClickException):
    """A bad argument found after parsing (by the part that owns it): exit 2 like click's own."""

    exit_code = 2


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, PromptWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        click.echo(f"warning: {category.__name__}: {message}", err=True)


def _as_click(e: Exception) -> click.ClickException:
    """One line for a failure: bad input (exit 2), a failure of ours or of the machine (exit 1)."""
    if isinstance(e, ConfigError):
        return BadInput(str(e))
    if isinstance(e, JacobigenError):
        return click.ClickException(str(e))
    if isinstance(e, ImportError) and "failed to map segment" in str(e):  # a shared library past the limit
        return click.ClickException(
            f"out of memory while loading a library ({e}): raise the memory limit (ulimit -v) or free memory"
        )
    short = _out_of_memory(e)
    if short is not None:
        return click.ClickException(f"out of memory{short}: lower --batch-size, --window, --num-images or --size")
    return click.ClickException(
        f"unexpected {type(e).__name__}: {e} (rerun as `jacobigen --debug ...` for the traceback, and please report it)"
    )


def _out_of_memory(e: Exception) -> str | None:
    """What could not be allocated when ``e`` is an out-of-memory error (Python's MemoryError, or
    torch's: the CPU allocator raises a plain RuntimeError, CUDA's an OutOfMemoryError); else None."""
    text = str(e)
    cpu = re.search(r"can't allocate memory: you tried to allocate (\d+) bytes", text)
    if cpu:
        mib = int(cpu[1]) / 2**20
        return f" (torch could not get {mib:,.1f} MiB more on the CPU: a limit such as ulimit -v, or other processes)"
    if type(e).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch here
        cuda = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", text)
        return f" (torch could not get {cuda[1] if cuda else 'more'} on the GPU)"
    return "" if isinstance(e, MemoryError) else None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that Python's flush at exit does not raise a second broken pipe."""
    import os
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Main(click.Group):
    """Turns every error into one line, unless ``--debug``."""

    def invoke(self, ctx):
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except (click.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except BrokenPipeError:  # the reader left (`jacobigen plan ... | head`): nothing more to say
                _quiet_stdout()
                ctx.exit(141)  # as a shell reports a process ended by SIGPIPE
            except Exception as e:
                if ctx.params.get("debug"):
                    raise
                raise _as_click(e) from None


@click.group(cls=Main)
@click.version_option(package_name="jacobigen")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error.")
def main(debug):
    """Fast, exact Jacobi decoding for autoregressive image generators."""
