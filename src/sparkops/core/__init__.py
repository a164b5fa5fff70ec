"""The neutral core: what every layer speaks and nothing of theirs.

``findings`` (Status, Evidence, Finding), ``verdict`` (the rule and the exit codes), ``errors``
(what front ends report as "the tool could not run"), ``units`` (bytes, named once). The core
imports no other part of the tool; every other package may import it (tests/test_layers.py).
"""
