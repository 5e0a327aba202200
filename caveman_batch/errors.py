"""One error hierarchy for caveman-batch.

Every error subclasses the matching builtin too, so callers that only know
Python's own exceptions still catch the right thing (a missing handle is also a
KeyError, a bad catalog also a ValueError). `exit_code` is what the CLI maps it to.
"""

from __future__ import annotations


class CavemanError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code = 2

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else self.__class__.__name__


class UsageError(CavemanError, ValueError):
    """The caller asked for something that cannot be done as asked."""

    exit_code = 1


class BudgetError(UsageError):
    """A payload budget below its floor: `field` (Budget's), the value given and the least."""

    def __init__(self, field: str, got: int, least: int) -> None:
        super().__init__(f"{field.replace('_', ' ')} must be at least {least} (got {got})")
        self.field, self.got, self.least = field, got, least


class HandleError(UsageError):
    """A recovery handle is malformed, unknown or ambiguous."""

    def __init__(self, message: str, handle: str) -> None:
        super().__init__(message)
        self.handle = handle


class InvalidHandleError(HandleError):
    """The handle is not of the form ccr_<8..64 hex>; the store was not touched."""


class UnknownHandleError(HandleError, KeyError):
    """No record in the store matches the handle."""


class AmbiguousHandleError(HandleError, LookupError):
    """A handle prefix matches more than one record."""

    def __init__(self, message: str, handle: str, matches: list[str]) -> None:
        super().__init__(message, handle)
        self.matches = matches


class IntegrityError(CavemanError):
    """A stored record does not hash back to its key: it is refused, never returned."""

    exit_code = 1

    def __init__(self, message: str, handle: str, reason: str) -> None:
        super().__init__(message)
        self.handle = handle
        self.reason = reason


class VerificationFailed(CavemanError):
    """`verify` found records that fail their checks."""

    exit_code = 1


class StoreError(CavemanError, OSError):
    """The store could not be opened, read or written (driver errors end up here)."""

    exit_code = 2


class StoreNotFoundError(UsageError, FileNotFoundError):
    """A command that only reads was pointed at a store that does not exist."""


class ForeignStoreError(UsageError):
    """A store URL names a file or folder that is not a caveman-batch store (another
    program's database, or not a database at all); it was left exactly as it was."""


class StoreURLError(UsageError):
    """A store URL names an unknown scheme or is malformed."""


class BackendUnavailableError(CavemanError, ImportError):
    """A backend's driver is not installed; the message names the install command."""

    exit_code = 1


class InputTooLargeError(UsageError):
    """An input exceeds the configured size cap; it was not read whole."""

    def __init__(self, message: str, source: str, limit: int) -> None:
        super().__init__(message)
        self.source = source
        self.limit = limit


class CatalogError(UsageError):
    """A catalog could not be read or parsed; knows its source and line."""

    def __init__(self, message: str, source: str, line: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.line = line
        self.lineno = line


class OutputError(CavemanError, OSError):
    """An output could not be published; nothing half-written was left behind."""

    exit_code = 2


class ExecutorError(CavemanError, RuntimeError):
    """The executor could not run the work (a Dask scheduler unreachable, a batch whose
    workers kept dying); nothing naming an uncommitted original was published."""

    exit_code = 2


class UpstreamExited(CavemanError):
    """The server behind `proxy` exited non-zero; the proxy exits with the same status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.exit_code = status


class SearchIndexError(CavemanError, OSError):
    """The tool search index could not be opened, read or written."""

    exit_code = 2


class SearchIndexOutdatedError(UsageError, SearchIndexError):
    """A search index of a schema this version does not read: older ones are rebuilt by
    `compress --index`, which only a reader refuses; a newer one needs a newer version."""


class SearchIndexInconsistentError(UsageError, SearchIndexError):
    """A search index whose rows disagree (edited by hand): a reader refuses it, since its
    searches would miss tools; `compress --index` rebuilds it."""


class NotASearchIndexError(UsageError, SearchIndexError):
    """The path given as a search index is a file of something else (another SQLite
    database, not a database at all): refused, and the file left as it was."""


class SearchIndexNotFoundError(UsageError, FileNotFoundError):
    """A command that only reads was pointed at a search index that does not exist."""

    def __init__(self, message: str, location: str) -> None:
        super().__init__(message)
        self.location = location


class ServersFileError(UsageError):
    """A `proxy --servers` file is malformed; knows the file and the key at fault."""

    def __init__(self, message: str, source: str, key: str | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.key = key


class QueryFileError(UsageError):
    """A labelled-queries file (eval search) could not be read; knows its file and line."""

    def __init__(self, message: str, source: str, line: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.line = line
        self.lineno = line


class EmbedderUnavailable(UsageError):
    """Dense embeddings were asked for, but the embed extra (or its bundled model) is missing."""
