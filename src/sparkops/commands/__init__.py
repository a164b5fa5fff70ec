"""Every ``spark-ops`` command's front-end code, one module per top-level command.

A module here parses its options with typer, calls the library (:mod:`sparkops.api` or a feature
package), wraps what comes back in its result (:mod:`sparkops.commands.contract`: ``render(format)``
and ``exit_code()``) and prints it. Libraries never import this package; :data:`sparkops.front.COMMANDS`
names each module, and :mod:`sparkops.cli` imports one only when its command runs. Each module's
``register(app)`` adds its command (or sub-app) to the typer app it is given.

A new command: a module here with ``register(app)``, one line in ``front.COMMANDS``; its JSON
schema, if it has one, registered in :mod:`sparkops.report.schemas`.
"""
