"""How every Mokka daemon lives in the foreground: one ``run(stop, ready)``, signals handled here.

kopf's shape (a thin CLI calls ``run(settings, stop_flag, ready_flag)``) with supervisord's
rules: stay in the foreground, log to stdout, exit 0 on SIGTERM/SIGINT, and exit
non-zero at once on bad input (before ``startsecs``, so supervisord gives up instead of
restarting forever).  Tests call a daemon's ``run`` from a thread instead
(``mokka_core.testing.runner.DaemonRunner``); nothing here is needed for that.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ..errors import MokkaError

if TYPE_CHECKING:
    import logging
    from pathlib import Path

EXIT_OK = 0
#: bad input or a failure to start: the message says which file or value
EXIT_FAILED = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: the logging level of :func:`log_to_stdout` (``logging.INFO``; logging is imported only where a daemon logs)
INFO = 20


def log_to_stdout(program: str, loggers: tuple[str, ...] = ("mokka_core",), level: int = INFO,
                  fmt: str = "{program}: %(message)s") -> None:
    """Send these loggers' records to stdout, each line prefixed with the program name."""
    import logging

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(fmt.format(program=program)))
    for name in loggers:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False


def stop_on_signals(program: str) -> threading.Event:
    """An event set by SIGTERM or SIGINT (a second one is logged: the shutdown under way will finish)."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            _log().warning("%s: %s again: already stopping, and that will finish", program, name)
        elif "logging" in sys.modules:  # else nothing set up a handler, and the record would go nowhere
            _log().info("%s: %s received, stopping", program, name)
        stop.set()

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    # a daemon exec'd with them blocked (the node daemon back from rest, ``node.rest``) gets the pending ones now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*STOP_SIGNALS, signal.SIGCHLD))
    return stop


def _log() -> logging.Logger:
    import logging  # here: a service that never logs (most) does not load it

    return logging.getLogger(__name__)


def foreground(program: str, run: Callable[[threading.Event, threading.Event], None],
               errors: tuple[type[BaseException], ...] = (MokkaError,)) -> int:
    """Run ``run(stop, ready)`` until it returns (``stop`` is set by SIGTERM/SIGINT); the exit status.

    An exception of ``errors`` (bad input, cannot start) is one line on stderr and
    :data:`EXIT_FAILED`; anything else is a bug and keeps its traceback.
    """
    stop = stop_on_signals(program)
    try:
        run(stop, threading.Event())
    except errors as exc:
        print(f"{program}: {exc}" if not str(exc).startswith(program) else str(exc), file=sys.stderr, flush=True)
        return EXIT_FAILED
    return EXIT_OK


def print_version(program: str, text: str, root: Path | None) -> NoReturn:
    """``--version`` of a fake NVIDIA daemon: ``text`` with ``{driver}`` the driver version of the node under
    ``root`` (else $MOKKA_ROOT, else /), as the real daemon's version is its driver's; exit 0 (1 without a node)."""
    from ..stage import nodefile
    from ..stage.paths import find_root

    try:
        print(text.format(driver=nodefile.load(find_root(root)).resolve().driver_version))
    except MokkaError as exc:
        raise SystemExit(f"{program}: {exc}") from None
    sys.exit(0)
