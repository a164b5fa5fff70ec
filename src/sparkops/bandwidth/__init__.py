"""Measure device memory bandwidth in the target environment (G5, issue 7).

``spark-ops bandwidth`` and ``preflight --measure``. Kept import-light: the CLI imports
``command`` at start-up, everything else loads inside the command.

- ``_measure_script.py``: runs in the user's interpreter (torch + stdlib only), prints one JSON line;
  its ``plan_buffer`` is the one sizing rule;
- ``refusal.py``: pure rules over the facts (other GPU jobs, short memory, unified-aware);
- ``probe.py``: launch (``--python`` or ``--container``), bounded; read the child; ``attach`` for preflight;
- ``report.py``: the library call behind the command, its JSON contract, text and exit codes;
- ``settings.py``: the validated ``bandwidth:`` block of thresholds.yaml.
"""
