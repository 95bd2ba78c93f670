"""Admin requests (what ``mqadmin`` and the console ask): ``topics``, ``groups``, ``runtime``,
``consumers`` (asked of a live consumer client) and ``views``, the read-only numbers that the
admin requests, the ops console and ``rocketstore topics|status|consumers`` report.
"""
