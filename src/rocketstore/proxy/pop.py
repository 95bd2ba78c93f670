"""The pop state moved down to the broker (``broker.services.pop_state``), where the remoting
door (POP_MESSAGE, ACK_MESSAGE, ...) and this gRPC door share it; kept here for its importers."""
from __future__ import annotations

from ..broker.services.pop_state import (ACK_TAG, CK_TAG, REVIVE_GROUP, RETRY_PREFIX,  # noqa: F401
                                         TOPIC_TYPE_NORMAL, TOPIC_TYPE_RETRY, Checkpoint,
                                         PopState, ReceiptHandle, revive_topic)
