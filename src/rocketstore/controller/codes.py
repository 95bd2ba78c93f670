"""The controller's request and response codes; they live with the other remoting codes
(``remoting/controller_codes.py``) because brokers in controller mode speak them too."""
from __future__ import annotations

from ..remoting.controller_codes import (FIRST_BROKER_CONTROLLER_ID, ControllerRequest,
                                         ControllerResponse)

__all__ = ["FIRST_BROKER_CONTROLLER_ID", "ControllerRequest", "ControllerResponse"]
