"""Errors a user can fix. The CLI prints them as one clear message, never a traceback."""


class UserError(Exception):
    """Bad input: a config, a dataset, a command line. The message says what to change."""


class ComponentDied(RuntimeError):
    """A component's process ended under the run (killed, out of memory, crashed): the run stops."""


class SyncTimeout(RuntimeError):
    """A weight synchronization did not finish within synchronizer.sync_timeout."""


def utf8_problem(data: bytes) -> str | None:
    """Where ``data`` stops being UTF-8 ("line 3, column 7 has byte 0xe9"), or None when it is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        return f"line {line}, column {column} has byte 0x{data[error.start]:02x}"
    return None
