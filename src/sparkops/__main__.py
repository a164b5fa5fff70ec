"""``python -m sparkops`` is the ``spark-ops`` command."""

from sparkops.cli import main

if __name__ == "__main__":
    main()
