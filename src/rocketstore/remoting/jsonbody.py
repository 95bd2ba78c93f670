"""JSON bodies as RocketMQ's fastjson writes them.

fastjson's default encoder writes integer map keys without quotes (``{"brokerAddrs":{0:"a"}}``,
``{"offsetTable":{"T@g":{0:12}}}``). Theory of operation: ``load_json_text`` parses standard JSON
and, only if that fails, quotes bare integer keys and tries again, so well-formed input pays
nothing extra.
"""
from __future__ import annotations

import json
import re
from typing import Any

_BARE_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def load_json_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))
