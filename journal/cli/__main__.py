"""``python -m journal.cli``: the same command as the ``journal`` script."""

from journal.cli import main

main()
