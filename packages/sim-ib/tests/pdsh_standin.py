"""A stand-in for ``pdsh -R ssh`` (what Topograph's bare-metal providers run): each "host" is a simulated node.

``pdsh [-R ssh] [-N] [-S] [-u SECONDS] -w HOST[,HOST...] COMMAND`` runs COMMAND (``sh -c``) on each node through
``mokka-sim-ib exec`` (the node at the real paths, the shim preloaded), the node roots coming from
``$MOKKA_TEST_NODE_ROOTS`` (JSON: name -> root). Like pdsh, each output line is prefixed ``HOST: `` unless ``-N``,
and the exit status is 0 whatever the commands' (the worst of theirs with ``-S``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    roots = json.loads(os.environ["MOKKA_TEST_NODE_ROOTS"])
    prefix, worst, hosts, args = True, False, [], list(argv)
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "-N":
            prefix = False
        elif option == "-S":
            worst = True
        elif option == "-w":
            hosts = [h for h in args.pop(0).split(",") if h]
        elif option in ("-R", "-u", "-f", "-l", "-t"):
            args.pop(0)
    status = 0
    for host in hosts:
        if host not in roots:
            print(f"pdsh@standin: {host}: ssh exited with exit code 255", file=sys.stderr)
            status = max(status, 255)
            continue
        done = subprocess.run([sys.executable, "-m", "mokka_sim_ib", "exec", "--root", roots[host], "--", "sh", "-c",
                               " ".join(args)], capture_output=True, text=True, timeout=300)
        for line in done.stdout.splitlines():
            print(f"{host}: {line}" if prefix else line)
        for line in done.stderr.splitlines():
            print(f"{host}: {line}", file=sys.stderr)
        status = max(status, done.returncode)
    return status if worst else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
