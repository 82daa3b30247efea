"""The documented home of the messages view: ``journal.pure.view`` re-exported."""

from journal.pure.view import *  # noqa: F403
from journal.pure.view import __all__  # noqa: F401
