"""``python -m sparkops`` is the ``spark-ops`` command."""

from sparkops.front import main

if __name__ == "__main__":
    main()
