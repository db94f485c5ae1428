"""The ``neural`` command line: one module per subcommand, registered in ``commands.py``."""
