"""dgx-spark-ops: is this DGX Spark (GB10) really ready for the job?

Flow: probes collect :class:`~sparkops.facts.model.Facts` -> checks judge them into findings ->
reporters render the :class:`~sparkops.report.model.Report`. The library API is in
:mod:`sparkops.api`; the CLI (:mod:`sparkops.cli`) is a thin layer over it.
"""

__version__ = "0.1.0"
