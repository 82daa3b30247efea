"""The documented home of the messages view: ``journal.pure.view`` re-exported."""

from journal.pure.view import *
from journal.pure.view import __all__  # noqa: F401
