"""What the project store refuses, each with a message that says why and what to do."""

from __future__ import annotations


class StoreError(Exception):
    """A request the store refuses; the message says why and what to do."""


class StoreTooNew(StoreError):
    """The store's schema was upgraded by a newer release of scrape_contracts than this one."""


class StoreNotFound(StoreError):
    """No project store at the URL: nothing was scraped with it (opening it would create an empty one)."""


class NothingToReview(StoreError):
    pass


class Superseded(StoreError):
    pass


class AlreadyAccepted(StoreError):
    pass


class StaleCandidate(StoreError):
    """The candidate was compared with an accepted version that is no longer the newest: decide again."""

    def __init__(self, message: str, newest: int) -> None:
        super().__init__(message)
        self.newest = newest


class SelectorConflict(StoreError):
    """Another run added a selector version first: reload and retry."""
