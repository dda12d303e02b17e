"""The error of uat_jax's data readers (``markets_data``, ``recsys_data``)."""

__all__ = ["DataError"]


class DataError(ValueError):
    """A data file or folder is missing or malformed; the message names the file and, where
    there is one, the row (or line) and the column, and says what to fix. The experiments CLI
    reports it as the user's input (exit 2, one line)."""
