"""Errors niclab reports to a person, without a traceback."""


class NiclabError(Exception):
    """A failure the user can act on; the CLI prints it and exits 1."""


class UsageError(NiclabError):
    """Bad input on the command line or in a file; the CLI exits 2."""
