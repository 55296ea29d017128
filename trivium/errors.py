"""Errors a user can fix. The CLI prints them as one clear message, never a traceback."""


class UserError(Exception):
    """Bad input: a config, a dataset, a command line. The message says what to change."""


class ComponentDied(RuntimeError):
    """A component's process ended under the run (killed, out of memory, crashed): the run stops."""


class SyncTimeout(RuntimeError):
    """A weight synchronization did not finish within synchronizer.sync_timeout."""
