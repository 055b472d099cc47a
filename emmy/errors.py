"""The one exception type for user-facing failures: the CLI prints it as one line."""


class EmmyError(Exception):
    """A failure caused by the user's input or environment, reported without a traceback."""
