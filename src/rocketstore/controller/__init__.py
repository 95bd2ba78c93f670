"""RocketMQ 5's controller: the server that decides, for each broker group (``brokerName``), who
is master, which replicas are in the SyncStateSet and under which epochs, and which broker ids
the group's members own. Brokers in controller mode (``enableControllerMode=true``) register
here, heartbeat here, and are told their role; ``mqadmin`` reads and changes the same state.

Rooms, bottom up (the import contract in ``importlinter.toml`` keeps them one way):

* ``codes``, ``config``   request/response codes and header names; ``controller.conf``'s keys.
* ``elect``               the elect policy (SyncStateSet first, unclean only when enabled).
* ``heartbeat``           which brokers are alive (heartbeats, their timeouts, closed channels).
* ``state``               the pure state machine: decisions return a ``Result`` carrying the
                          events to make durable; ``apply`` is the only mutator.
* ``journal``             durability: an fsynced append-only event log plus an atomic snapshot
                          under ``controllerStorePath``; SIGKILL loses no answered decision.
* ``processors``          request code -> handler over the state, journal and heartbeats.
* ``service``             the lifecycle: scans for dead brokers, triggers elections, notifies
                          brokers of role changes (NOTIFY_BROKER_ROLE_CHANGED).

``rocketstore controller --config controller.conf`` (``commands/controller.py``) runs one.
"""
