"""Errors a user can cause and fix.

Every mistake in a config, a flag or an input file raises a `UserError` whose
message names the field and what is allowed; the CLI prints it on one line and
exits with code 2, so nobody has to read a traceback to fix a typo.
"""


class UserError(Exception):
    """A problem with the user's input; the message is shown as it is."""

    exit_code = 2


class ConfigError(UserError, ValueError):
    """An invalid config value or combination of values."""
