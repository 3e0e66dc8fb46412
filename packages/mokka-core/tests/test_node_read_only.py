"""A root that goes read-only while the node tears down: what is left is named, and a later `node down` removes it.

Runs the installed surfaces' real services (fabric manager, IB responder, kernel log) under
`mokka node up`; needs root for the private mount namespace (CI runs as root) and every surface
package (`tox -e e2e`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.testing.consumers import missing
from mokka_core.testing.tree import tree_snapshot

pytestmark = pytest.mark.e2e

#: run inside `unshare --mount`: once the node is up, the root bound onto itself and remounted read-only
#: (bound only then: the logs the node keeps open for writing hold the mount they were opened through)
READ_ONLY_DURING_TEARDOWN = """
import signal, subprocess, sys, time
root, mokka = sys.argv[1], sys.argv[2]
daemon = subprocess.Popen([mokka, "node", "up", "--profile", "gb200", "--gpus", "4", "--root", root],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.monotonic() + 60
while subprocess.run([mokka, "node", "status", "--root", root, "--ready"], capture_output=True).returncode:
    assert time.monotonic() < deadline and daemon.poll() is None, "node not ready"
    time.sleep(0.2)
subprocess.run(["mount", "--bind", root, root], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", root, root], check=True)
daemon.send_signal(signal.SIGTERM)
out, _ = daemon.communicate(timeout=60)
print(daemon.returncode)
print(out)
"""


@pytest.fixture(autouse=True)
def every_service() -> None:
    from mokka_core.stage.surface import discover

    if os.geteuid() != 0:
        missing("remounts the root read-only in a private mount namespace (root; CI runs as root)")
    absent = sorted({"gpu", "fabricmanager", "ib"} - set(discover()))
    if absent:
        reason = f"surface package(s) {', '.join(absent)} not installed in this environment"
        pytest.fail(reason) if os.environ.get("MOKKA_E2E") == "1" else pytest.skip(reason)


def test_node_down_removes_what_a_teardown_on_a_read_only_root_left(tmp_path: Path) -> None:
    """The services' markers (fabricmanager.ready, responder.sock, kmsg.ready) were left behind `node down`."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("host\n")
    before = tree_snapshot(root)
    mokka = Path(sys.executable).with_name("mokka")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c",
                           READ_ONLY_DURING_TEARDOWN, str(root), str(mokka)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    daemon_rc, out = done.stdout.split("\n", 1)
    assert daemon_rc == "1", out  # a node left behind is a failure, and names what is left
    assert "mokka-node: node not torn down completely, left: " in out, out
    for marker in ("var/lib/mokka/run/fabricmanager.ready", "var/lib/mokka/ib/responder.sock"):
        assert marker in out.split("not torn down completely")[1], out
        assert (root / marker).exists()  # outside that namespace the root is writable again
    result = CliRunner().invoke(app, ["node", "down", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert tree_snapshot(root) == before
