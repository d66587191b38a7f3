"""Run by tests/integration/test_forkserver.py through the fork server: writes what it
was started with (environment, argv, session) to its output, then exits with argv[1]."""

import json
import os
import sys

if __name__ == "__main__":
    seen = {"env": dict(os.environ), "argv": sys.argv[1:], "sid": os.getsid(0), "pid": os.getpid()}
    print(json.dumps(seen))
    raise SystemExit(int(sys.argv[1]))
