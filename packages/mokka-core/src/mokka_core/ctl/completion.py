"""``nvml-mock-ctl``'s shell completion: what completes a command line, from the ctl's own parser.

The shell function (:mod:`.shell`) runs the command with :data:`~mokka_core.ctl.COMPLETE_VAR` set;
``relay.main`` hands it here before anything else.  The line is walked through the parser
``cli.build_parser`` makes, so verbs and options are the ones the command accepts.  A positional's
values come from its ``choices``, else from its metavar (:data:`VALUES`): GPU targets from the node
the line names (``--root``, else the node the command would find), surfaces, failure modes, throttle
reasons, fabric flags, profile keys.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .shell import CURRENT_VAR


def main() -> None:
    """Print the candidates for the line in the environment (the shell function calls this)."""
    line = os.environ.get("COMP_LINE", "")
    current = os.environ.get(CURRENT_VAR)
    try:
        found = candidates(line, current)
    except Exception:  # a completion that fails offers nothing; the shell then completes file names
        found = []
    sys.stdout.write("".join(f"{word}\n" for word in found))
    sys.stdout.flush()


def candidates(line: str, current: str | None = None) -> list[str]:
    """What completes the last word of ``line`` (the command line up to the cursor), relative to
    ``current``, the part of that word the shell replaces (bash splits words at = and :; default: all of it)."""
    words = _split(line)
    typed = "" if not line or line[-1].isspace() else (words.pop() if words else "")
    found = sorted(_complete(words[1:], typed))
    if current is not None and current != typed and typed.endswith(current):
        cut = len(typed) - len(current)
        return [word[cut:] for word in found if len(word) > cut]
    return found


def _split(line: str) -> list[str]:
    """The words of ``line`` as the shell passes them (quotes removed); an open quote counts as closed."""
    import shlex

    for closing in ("", '"', "'"):
        try:
            return shlex.split(line + closing)
        except ValueError:
            continue
    return line.split()


def _complete(words: Sequence[str], typed: str) -> Iterable[str]:
    from .cli import build_parser

    parser = build_parser()
    verbs = _subcommands(parser)
    current, verb, positionals, waiting, root = parser, None, [], None, None
    for word in words:
        if waiting is not None:
            root = word if waiting.dest == "root" else root
            waiting = None
        elif word.startswith("-") and word != "-":
            name, equals, value = word.partition("=")
            action = _options(current).get(name)
            if action is not None and action.dest == "root" and equals:
                root = value
            elif action is not None and action.nargs != 0 and not equals:
                waiting = action
        elif verb is None:
            if word not in verbs:
                return []
            current, verb = verbs[word], word
        else:
            positionals.append(word)
    if waiting is not None:
        return [] if waiting.choices is None else _starting(typed, waiting.choices)
    if typed.startswith("-"):
        if "=" in typed:
            return []
        return _starting(typed, [name for name in _options(current) if name.startswith("--")])
    if verb is None:
        return _starting(typed, verbs)
    action, given = _positional(current, positionals)
    if action is None:
        return []
    if action.choices is not None:
        return _starting(typed, action.choices)
    values = VALUES.get(action.metavar) if isinstance(action.metavar, str) else None
    if values is None:
        return []
    return [word for word in values(typed, root) if word not in given]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {name: action for action in parser._actions for name in action.option_strings}


def _positional(parser: argparse.ArgumentParser, given: Sequence[str]) -> tuple[argparse.Action | None, list[str]]:
    """The positional the next word fills, and the words already given to it (one that takes many)."""
    taken = 0
    for action in parser._actions:
        if action.option_strings:
            continue
        if action.nargs in ("+", "*"):
            return action, list(given[taken:])
        if taken == len(given):
            return action, []
        taken += 1
    return None, []


def _starting(typed: str, names: Iterable[str]) -> list[str]:
    return [name for name in names if name.startswith(typed)]


# --- values of positionals, by metavar ----------------------------------------------------------------

def gpu_targets(typed: str, root: str | None) -> list[str]:
    """``all`` and the GPUs of the node (their indices; their UUIDs once a word starts like one)."""
    node = _node(root)
    names = ["all"]
    if node is not None:
        names += [str(gpu.index) for gpu in node.gpus]
        if typed[:1] in ("G", "g"):
            names += [gpu.uuid for gpu in node.gpus]
    return _starting(typed, names)


def _node(root: str | None) -> Any:
    """The node under ``root`` (else the one the command would find): from its snapshot, else from its
    files (slower: what a stale snapshot costs); None if there is none."""
    from ..errors import MokkaError
    from ..stage import nodefile, snapshot
    from ..stage.paths import find_root

    try:
        where = find_root(Path(root) if root else None).absolute()
        snap = snapshot.load(where)
        return snap.node() if snap is not None else nodefile.load(where).resolve()
    except MokkaError:
        return None


def surfaces(typed: str, root: str | None) -> list[str]:
    from ..schema.surfaces import SURFACES

    return _starting(typed, SURFACES)


def failure_modes(typed: str, root: str | None) -> list[str]:
    from .verbs import FAILURE_MODES

    return _starting(typed, FAILURE_MODES)


def throttle_reasons(typed: str, root: str | None) -> list[str]:
    from .verbs import THROTTLE_ALIASES, THROTTLE_REASONS

    return _starting(typed, ["none", *THROTTLE_ALIASES, *THROTTLE_REASONS])


def fabric_flags(typed: str, root: str | None) -> list[str]:
    from .verbs import FABRIC_FLAGS, FABRIC_MISCONFIGURATIONS

    return _starting(typed, ["healthy", *FABRIC_FLAGS, *FABRIC_MISCONFIGURATIONS])


def profile_keys(typed: str, root: str | None) -> list[str]:
    """Key paths under a GPU, one level at a time: a block as ``fan.``, a value as ``fan.speed_percent=``."""
    from ..model.config import BLOCKS, GpuConfig
    from ..model.value import Value

    if "=" in typed:  # the value: anything YAML
        return []
    parent, dot, _ = typed.rpartition(".")
    block: type[Value] = GpuConfig
    for part in parent.split(".") if parent else ():
        child = BLOCKS.get(block, {}).get(part)
        if child is None:
            return []
        block = child
    nested = BLOCKS.get(block, {})
    names = [f"{parent}{dot}{name}{'.' if name in nested else '='}" for name in block.__slots__]
    return _starting(typed, names)


#: what completes a positional without ``choices``, by its metavar in the argument table
VALUES: dict[str, Callable[[str, str | None], list[str]]] = {
    "GPU": gpu_targets,
    "SURFACE": surfaces,
    "MODE": failure_modes,
    "REASON": throttle_reasons,
    "FLAG": fabric_flags,
    "KEY=VALUE": profile_keys,
}
#: positionals that take a number or a free word: nothing to offer
FREE = frozenset({"CODE", "C", "W", "PCT", "MHZ", "N", "RATE", "ARG"})
