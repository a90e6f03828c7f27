#!/usr/bin/env python3
"""A minimal QMP client for the e2e scripts (tests/e2e/migration.sh).

  qmp.py SOCKET run COMMAND [JSON-ARGUMENTS]   runs one command, prints its "return" as JSON
  qmp.py SOCKET wait STATUS[,STATUS...] SECS   polls query-migrate every 50 ms until its status
                                               is one of STATUS; prints the last answer as JSON
                                               (exit 1 on timeout)

Exit status 1 when QEMU answers with an error (printed on stderr) or the socket cannot be used.
"""
import json
import socket
import sys
import time


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rwb", buffering=0)
        self._read()  # the greeting
        self.run("qmp_capabilities")

    def _read(self):
        while True:
            line = self.file.readline()
            if not line:
                raise ConnectionError("QMP socket closed")
            msg = json.loads(line)
            if "event" not in msg:
                return msg

    def run(self, command, arguments=None):
        req = {"execute": command}
        if arguments:
            req["arguments"] = arguments
        self.file.write(json.dumps(req).encode() + b"\n")
        msg = self._read()
        if "error" in msg:
            raise RuntimeError(f"{command}: {msg['error'].get('desc', msg['error'])}")
        return msg.get("return")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        qmp = Qmp(argv[1])
        if argv[2] == "run":
            args = json.loads(argv[4]) if len(argv) > 4 else None
            print(json.dumps(qmp.run(argv[3], args)))
            return 0
        if argv[2] == "wait":
            want = argv[3].split(",")
            deadline = time.monotonic() + float(argv[4])
            while True:
                info = qmp.run("query-migrate")
                if info.get("status") in want:
                    print(json.dumps(info))
                    return 0
                if time.monotonic() > deadline:
                    print(json.dumps(info))
                    print(f"qmp: timeout waiting for migration status {argv[3]}", file=sys.stderr)
                    return 1
                time.sleep(0.05)
        print(__doc__, file=sys.stderr)
        return 2
    except (OSError, ConnectionError, RuntimeError, ValueError) as e:
        print(f"qmp: {argv[1]}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
