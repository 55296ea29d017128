"""Errors a user can fix. The CLI prints them as one clear message, never a traceback."""


class UserError(Exception):
    """Bad input: a config, a dataset, a command line. The message says what to change."""
