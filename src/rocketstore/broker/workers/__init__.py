"""The multi-process broker (``serve --workers N``): protocol workers beside one writer.

``link`` is the sans-IO wire between them, ``worker`` the worker process, ``encode`` what a
worker does to a plain send before the writer sees it, ``pool`` the writer's side (spawning,
supervising, the virtual connections, the put fast path). docs/DESIGN.md, "Speed", has the
picture.
"""
