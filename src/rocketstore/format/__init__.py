"""Pure byte layouts: no files, sockets or threads in this package."""
