"""``spark-ops exporter``: this Spark's readings as Prometheus metrics (see :mod:`.collector`)."""
