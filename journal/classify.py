"""The documented home of the submission classifier: ``journal.pure.classify`` re-exported."""

from journal.pure.classify import *
from journal.pure.classify import __all__  # noqa: F401
