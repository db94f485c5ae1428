"""The app's services without Qt: paths, settings, conversations, models.

The CLI, `neural doctor`, the API and the GUI share them; nothing here imports Qt.
"""
