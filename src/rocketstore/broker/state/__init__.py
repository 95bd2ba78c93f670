"""The broker's state: what it knows besides the messages, each table behind its own manager.

``topics`` (``topics.json`` and the rules for topic names, auto-creation, retry and DLQ topics),
``offsets`` (``consumerOffset.json``, ``delayOffset.json``), ``subgroups``
(``subscriptionGroup.json``), ``filters`` (``consumerFilter.json`` and the SQL92 filters a pull
uses), ``consumers`` and ``producers`` (who is connected, fed by HEART_BEAT), ``stats`` (message
counters), ``topic_validator`` (system topics) and ``files`` (how every state file is read and
written). Nothing here handles a request or imports another part of the broker.
"""
