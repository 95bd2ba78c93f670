"""Files and services: mapped files, CommitLog, ConsumeQueue, IndexFile, dispatch, recovery."""
