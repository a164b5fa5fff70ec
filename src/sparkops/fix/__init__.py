"""``spark-ops fix``: the only commands that change the system, and only with ``--apply``."""
