"""The documented home of the messages view: ``journal.pure.view`` re-exported."""

# The star import is the point: this module re-exports exactly the pure module's __all__.
from journal.pure.view import *  # noqa: F403
from journal.pure.view import __all__  # noqa: F401
