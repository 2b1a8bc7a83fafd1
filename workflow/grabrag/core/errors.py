"""Errors a user can act on: each names the culprit and says what to do."""


class GrabragError(Exception):
    """Base class for every error the workflow reports to the user."""


class ConfigError(GrabragError):
    """The config is invalid: the message names the key."""


class AssetError(GrabragError):
    """A model, encoder or dataset could not be materialised."""


class DataError(GrabragError):
    """A data row or file is malformed: the message names the file and row."""
