"""One-line errors for every `autotune` command (cli.py and cli_learn.py share them).

A user error - malformed HLO, a bad flag value, an unusable path, a checkpoint of another run - is
one line on stderr, ``autotune: error: ...``, and exit status 2; tracebacks are for bugs only.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import click

USER_ERROR_EXIT = 2


class UserError(click.ClickException):
    """A clear one-line error for the user (exit status 2)."""

    exit_code = USER_ERROR_EXIT

    def show(self, file: Any = None) -> None:  # one line, no "Error:" banner duplication
        click.echo(f"autotune: error: {one_line(self.format_message())}", err=True)


def one_line(text: str) -> str:
    """The first non-empty line of a message (messages from libraries may span several)."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def usage_error_message(e: click.UsageError) -> str:
    """A click usage error (bad option value, unknown option, missing argument) as one line."""
    msg = one_line(e.format_message())
    ctx = e.ctx
    if ctx is not None and ctx.command_path:
        msg += f" (see '{ctx.command_path} --help')"
    return msg


class OneLineErrorsGroup(click.Group):
    """A click group whose usage errors print one line and exit 2, as every other user error."""

    @staticmethod
    def _one_line(e: click.UsageError) -> UserError:
        err = UserError(usage_error_message(e))
        err.exit_code = e.exit_code if e.exit_code else USER_ERROR_EXIT
        return err

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `autotune`: the help text
                raise
            raise self._one_line(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":
                raise
            raise self._one_line(e) from None


def friendly(fn: Callable) -> Callable:
    """Turn known error types into one-line messages with exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from hardware.xla import XlaApiError
        from autotune.compiler.hlo import HloParseError
        from autotune.compiler.program import ProgramError
        from autotune.tuning.store import StoreError
        from autotune.tuning.result import TuningError
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except HloParseError as e:
            raise UserError(e.one_line().replace(": error: ", ": ", 1)) from None
        except (ProgramError, StoreError, TuningError, XlaApiError) as e:
            raise UserError(one_line(str(e)) or type(e).__name__) from None
        except KeyError as e:
            raise UserError(f"unknown name {e}") from None
        except (ValueError, OSError) as e:
            raise UserError(one_line(str(e)) or type(e).__name__) from None
    return wrapper
