"""A worker that starts slowly and then hangs: the request says how long it is silent
before its first event (``before_s``) and then after it (``after_s``)."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    events = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8", buffering=1)
    request = json.loads(sys.stdin.read())
    time.sleep(request["before_s"])
    events.write('{"event": "started"}\n')
    time.sleep(request["after_s"])
    events.write('{"event": "done"}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
