"""``spark-ops postmortem``: what ended the last run (see :mod:`.run`)."""
