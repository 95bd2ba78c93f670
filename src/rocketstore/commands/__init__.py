"""Sub-commands of the ``rocketstore`` CLI, one module each (see ``rocketstore.cli``)."""
