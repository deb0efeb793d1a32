"""One exception family whose messages are meant for the person at the terminal.

The CLI turns any LookupkitError into one line on stderr and a non-zero exit; anything else is a bug.
"""


class LookupkitError(Exception):
    """Base of every error lookupkit raises on bad input or environment."""


class InputError(LookupkitError):
    """A corpus, token file, flag or path that cannot be used."""


class FormatError(LookupkitError):
    """A cache file that is truncated, corrupted, of an unknown kind or of a future version."""


class VocabMismatchError(LookupkitError):
    """A cache built for another vocabulary than the tokenizer/drafter it is used with."""


class LookupkitWarning(UserWarning):
    """Something that may give a silently poor result, e.g. a cache whose vocabulary cannot be checked.

    The CLI prints each as one `warning: ...` line on stderr."""
