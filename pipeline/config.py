"""Job configuration files: ``--config FILE`` on every command (``configs/*.toml``).

A file is TOML. Each table is named by a command's words (``[btc.reindex]``, ``[eth.import]``,
``[flow.replay]``, ``[flow.checkpoint.read]``) and holds that command's long options, spelled
as on the command line without the dashes (``memory-budget = "8G"``; ``memory_budget`` works
too). ``[defaults]`` holds options given to every command that has them (``ray-address``,
``memory-budget``, ``metrics-port``, ...). A flag on the command line overrides the file.
Strings have ``~`` and ``$VARS`` expanded; a relative path is relative to the file's folder
(so a job's file works from any directory, and under ``ray job submit --working-dir .`` in
the uploaded folder). The commands that read a data folder (``btc status``, ``query``,
``verify``, ...) take the one ``data`` the file names for their chain, or for the whole job,
so one file serves the job's run and its reads. Anything the file names that no command has
is an error, so a typo never goes silently unused.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import Any

from rechain.pipeline.errors import RechainError

OPTION = "--config"
DEFAULTS = "defaults"


def add_to_every_command(parser: argparse.ArgumentParser) -> None:
    for sub in leaf_parsers(parser).values():
        sub.add_argument(
            OPTION,
            type=Path,
            default=None,
            metavar="FILE",
            help="job configuration (TOML, see configs/); flags given here override it",
        )


def leaf_parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command's parser, keyed by its words (``("btc", "reindex")``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {words: parser}
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, sub in subs[0].choices.items():
        out.update(leaf_parsers(sub, (*words, name)))
    return out


def config_path(argv: list[str]) -> Path | None:
    """The ``--config`` value in ``argv``, read before parsing (it changes the parsers)."""
    for i, token in enumerate(argv):
        if token == OPTION and i + 1 < len(argv):
            return Path(argv[i + 1])
        if token.startswith(OPTION + "="):
            return Path(token.split("=", 1)[1])
    return None


def load(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise RechainError(f"config {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise RechainError(f"config {path}: not valid TOML: {e}") from e


def apply(parser: argparse.ArgumentParser, path: Path, argv: list[str]) -> None:
    """Makes the file's values the defaults of the commands it names (checked against them)."""
    doc = load(path)
    commands = leaf_parsers(parser)
    given = {t.split("=", 1)[0] for t in argv if t.startswith("--")}
    defaults = doc.pop(DEFAULTS, {})
    if not isinstance(defaults, dict):
        raise RechainError(f"config {path}: [{DEFAULTS}] must be a table")
    sections = _sections(doc, path)
    unknown = sorted(".".join(w) for w in sections if w not in commands)
    if unknown:
        known = ", ".join(sorted(".".join(w) for w in commands))
        raise RechainError(f"config {path}: no command {', '.join(unknown)} (commands: {known})")
    used_defaults: set[str] = set()
    for words, sub in commands.items():
        options = _options(sub)
        for key, value in defaults.items():
            if _norm(key) in options:
                used_defaults.add(key)
                _set(sub, options[_norm(key)], value, given, path, DEFAULTS)
        for key, value in sections.get(words, {}).items():
            if _norm(key) not in options:
                raise RechainError(
                    f"config {path}: [{'.'.join(words)}] has no option {key!r} "
                    f"(options: {', '.join(sorted(options))})"
                )
            _set(sub, options[_norm(key)], value, given, path, ".".join(words))
    unused = sorted(set(defaults) - used_defaults)
    if unused:
        raise RechainError(f"config {path}: [{DEFAULTS}] {', '.join(unused)}: no command has it")
    _share_data(commands, sections, given, path)


def _share_data(
    commands: dict[tuple[str, ...], argparse.ArgumentParser],
    sections: dict[tuple[str, ...], dict[str, Any]],
    given: set[str],
    path: Path,
) -> None:
    """A command reading a data folder that the file gives none takes the ``data`` of the
    file's sections of its chain (``btc status`` from ``[btc.reindex]``), or of all its
    sections (``query``, ``verify``), when they name one folder."""
    named = {w: sec["data"] for w, sec in sections.items() if "data" in sec}
    for words, sub in commands.items():
        action = _options(sub).get("data")
        if action is None or words in named or action.default is not None:
            continue
        same_chain = {v for w, v in named.items() if w[0] == words[0]}
        candidates = same_chain or ({*named.values()} if len(words) == 1 else set())
        if len(candidates) == 1:
            _set(sub, action, candidates.pop(), given, path, "data of the job")


def _sections(doc: dict[str, Any], path: Path) -> dict[tuple[str, ...], dict[str, Any]]:
    """Nested TOML tables → {command words: options}; a table holding only tables is a prefix."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}

    def walk(table: dict[str, Any], words: tuple[str, ...]) -> None:
        values = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if values or not table:
            out[words] = values
        for k, v in table.items():
            if isinstance(v, dict):
                walk(v, (*words, k))

    for name, table in doc.items():
        if not isinstance(table, dict):
            raise RechainError(f"config {path}: {name!r} outside a [command] table")
        walk(table, (name,))
    return out


def _norm(key: str) -> str:
    return key.replace("_", "-")


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Long option name (without dashes) → action; the positional arguments are not options."""
    out = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and action.dest not in ("help", "config"):
            for s in longs:
                out[s[2:]] = action
    return out


def _set(
    parser: argparse.ArgumentParser,
    action: argparse.Action,
    value: Any,
    given: set[str],
    path: Path,
    section: str,
) -> None:
    if any(s in given for s in action.option_strings):
        return  # the command line wins
    group = _exclusive_group(parser, action)
    if group is not None and any(
        s in given for a in group._group_actions for s in a.option_strings
    ):
        return  # a sibling given on the command line replaces this one
    where = f"config {path}: [{section}] {action.option_strings[-1][2:]}"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise RechainError(f"{where}: expected true or false, got {value!r}")
        # --xor/--no-xor share a dest: a value for either names the dest's final value.
        parser.set_defaults(
            **{action.dest: value if isinstance(action, argparse._StoreTrueAction) else not value}
        )
        return
    if isinstance(value, (dict, list)):
        raise RechainError(f"{where}: expected a single value, got {value!r}")
    if isinstance(value, str):
        value = os.path.expandvars(os.path.expanduser(value))
        if action.type is Path and not os.path.isabs(value):
            value = os.path.normpath(path.parent / value)
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise RechainError(f"{where}: {value!r} is not one of {choices}")
    if action.type is not None and not isinstance(value, str):
        value = str(value)  # argparse converts string defaults with the option's type
    action.default = value
    action.required = False
    if group is not None:
        group.required = False


def _exclusive_group(
    parser: argparse.ArgumentParser, action: argparse.Action
) -> Any:  # argparse's _MutuallyExclusiveGroup is private
    for group in parser._mutually_exclusive_groups:
        if action in group._group_actions:
            return group
    return None
