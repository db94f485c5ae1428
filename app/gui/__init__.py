"""Desktop app wiring: storage, settings, engine host, background tasks, API switch, crash handler."""
