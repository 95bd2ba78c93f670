"""Request processors: what a client's request does, one module per kind of request.

``send`` (10, 36, 310, 320), ``pull`` (11), ``client`` (heartbeat, offsets, queries: 12, 14,
15, 17, 29-35, 38), ``locks`` (41, 42), ``sql92`` (46), ``reply`` (324, 325) and
``transaction`` (37), ``pop`` (RocketMQ 5: 200050-200055, 200151). Each works on broker state (``..state``) and the store.
"""
