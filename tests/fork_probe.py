"""Run by tests/integration/test_forkserver.py through the fork server and with
``python -m``: writes what it was started with (environment, argv, session, signal
dispositions) to its output, then exits with argv[1]."""

import json
import os
import signal
import sys

WATCHED = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)

if __name__ == "__main__":
    seen = {
        "env": dict(os.environ),
        "argv": sys.argv[1:],
        "sid": os.getsid(0),
        "pid": os.getpid(),
        "signals": {s.name: str(signal.getsignal(s)) for s in WATCHED},
    }
    print(json.dumps(seen))
    raise SystemExit(int(sys.argv[1]))
