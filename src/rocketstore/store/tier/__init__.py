"""The tiered store: each queue's messages copied to flat files on a slower, bigger backend.

RocketMQ 5's ``tieredstore`` layout (``PosixFileSegment``), byte for byte: per queue a flat
COMMIT_LOG (the queue's CommitLog records back to back, PHYSICALOFFSET rewritten to the
record's offset in this flat file, which starts at 0) and a flat CONSUME_QUEUE (20-byte units
pointing into it; its first file is named for ``first queue offset * 20``), under
``<base>/<md5(cluster)[:8]>_<cluster>/<broker>/<topic>/<queueId>/<TYPE>/<file name>``.

``service.TierService`` feeds it off the put path (``TierDispatcher`` only notes which queues
grew); ``flat.FlatQueue`` holds one queue's files; ``backend`` is the storage interface with
``posix`` and ``s3`` behind it; ``layout`` the names and the metadata JSON.
"""
