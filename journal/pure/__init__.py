"""Pure functions over events, no I/O: the classifier, the recovery planner, the messages view
and the derived-state check. They import only ``journal.model`` and ``journal.errors``, so each
is tested with tables of cases and Hypothesis properties."""
