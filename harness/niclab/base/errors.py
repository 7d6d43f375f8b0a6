"""Errors niclab reports to a person, without a traceback, and the exit code each one means."""

from __future__ import annotations


class NiclabError(Exception):
    """A failure the user can act on; the CLI prints it and exits 1."""

    exit_code = 1
    shown_as_is = False  # True: the message already says where (FILE:LINE:COL), print it without "niclab: "


class UsageError(NiclabError):
    """Bad input on the command line or in a file; the CLI exits 2."""

    exit_code = 2


def describe_exception(exc: BaseException) -> str:
    """One line for a person: what went wrong, without a traceback."""
    if isinstance(exc, NiclabError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return f"internal error: {type(exc).__name__}: {exc}"
