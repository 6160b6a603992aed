"""Usage errors the way people read them: the message first, then a short usage line, then a
"did you mean" for a near-miss command, flag or choice.

argparse prints the whole usage (every option of the command) before its one-line message; for a
command with forty options the message scrolls away. ``Parser`` prints ``rlkit plan: error: ...``
first, then ``usage: rlkit plan [options] (rlkit plan --help lists them)``, then the closest
known spelling when there is one. Exit status 2, as argparse.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import NoReturn, Sequence

# The one did-you-mean measure of the kit (config keys, model and instance names, and here
# commands, flags and choices); ops.cli loads infra.config at start anyway.
from infra.config.errors import close_match

EXIT_USAGE = 2


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors put the message first (subcommands inherit the class)."""

    def short_usage(self) -> str:
        subs = subcommands(self)
        if subs:
            return f"usage: {self.prog} COMMAND [options]  ({self.prog} --help lists the commands)"
        required = [a for a in self._actions if a.required or not a.option_strings]
        words = []
        for a in required:
            if a.option_strings:
                words.append(f"{a.option_strings[-1]} {a.metavar or a.dest.upper()}")
            elif a.dest != "help":
                words.append(str(a.metavar or a.dest))
        return (f"usage: {self.prog} {' '.join(words + ['[options]'])}  "
                f"({self.prog} --help lists them)")

    def hint(self, message: str) -> str | None:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            known = re.findall(r"'([^']*)'", choice.group(2)) or [
                c.strip() for c in choice.group(2).split(",")]
            close = close_match(choice.group(1), known)
            return f"did you mean {close!r}?" if close else None
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            hints = []
            for word in unknown.group(1).split():
                if word.startswith("-"):
                    close = close_match(word.split("=")[0], option_strings(self))
                    if close:
                        hints.append(f"{word.split('=')[0]} -> {close}")
            return f"did you mean: {'; '.join(hints)}?" if hints else None
        return None

    def error(self, message: str) -> NoReturn:
        message = message.replace("argument COMMAND: ", "")
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        print(self.short_usage(), file=sys.stderr)
        hint = self.hint(message)
        if hint:
            print(hint, file=sys.stderr)
        self.exit(EXIT_USAGE)


def _unknown_flags(parser: argparse.ArgumentParser, argv: Sequence[str]
                   ) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)command ``argv`` names and the long flags in it that it does not know (argparse
    would first complain about a missing required option, hiding the typo that caused it)."""
    target, words = parser, list(argv)
    for i, word in enumerate(words):
        subs = subcommands(target)
        if word in subs:
            target = subs[word]
            continue
        if word == "--":
            break
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            known = option_strings(target)
            if not any(k.startswith(flag) for k in known):
                return target, [flag]
    return target, []


def parse(parser: Parser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag is reported by the subcommand it was given to, so the
    "did you mean" looks among that command's flags."""
    target, unknown = _unknown_flags(parser, argv)
    if unknown:
        target.error(f"unrecognized arguments: {' '.join(unknown)}")
    args, extra = parser.parse_known_args(list(argv))
    if extra:
        target: argparse.ArgumentParser = parser
        for dest in ("command", "image_command"):
            name = getattr(args, dest, None)
            subs = subcommands(target)
            if name in subs:
                target = subs[name]
        target.error(f"unrecognized arguments: {' '.join(extra)}")
    return args
