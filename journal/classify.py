"""The documented home of the submission classifier: ``journal.pure.classify`` re-exported."""

# The star import is the point: this module re-exports exactly the pure module's __all__.
from journal.pure.classify import *  # noqa: F403
from journal.pure.classify import __all__  # noqa: F401
