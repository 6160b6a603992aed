"""`rlkit completion bash|zsh`: the script parses, lists every subcommand, and completes in a real
bash (the function is called the way bash's programmable completion calls it)."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from ops import cli


def script(shell: str, capsys) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


def all_commands(parser: argparse.ArgumentParser, path: str = "rlkit") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(f"{path} {name}")
                found += all_commands(sub, f"{path} {name}")
    return found


def complete(bash_script: str, tmp_path, *words: str) -> list[str]:
    """What the completion function offers for ``rlkit <words>`` (the last word is the one being
    completed)."""
    path = tmp_path / "rlkit.bash"
    path.write_text(bash_script)
    line = " ".join(f"'{w}'" for w in ("rlkit", *words))
    before = words[-2] if len(words) > 1 else "rlkit"
    # bash calls the function with the command, the current word and the previous one.
    program = (f"source {path}\nCOMP_WORDS=({line})\nCOMP_CWORD={len(words)}\n"
               f"_rlkit rlkit '{words[-1]}' '{before}'\n"
               'printf "%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True,
                          text=True, check=True)
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_script_parses_and_lists_every_subcommand(tmp_path, capsys):
    text = script("bash", capsys)
    path = tmp_path / "rlkit.bash"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    commands = all_commands(cli.build_parser())
    assert {"rlkit check", "rlkit preflight", "rlkit gate", "rlkit launch", "rlkit teardown",
            "rlkit completion"} <= set(commands)
    for command in commands:
        assert f'"{command}")' in text, command
    top = complete(text, tmp_path, "")
    assert sorted(c.split()[1] for c in commands if c.count(" ") == 1) == \
        sorted(w for w in top if not w.startswith("-"))


def test_bash_completes_commands_options_and_choices(tmp_path, capsys):
    text = script("bash", capsys)
    assert complete(text, tmp_path, "pre") == ["preflight"]
    assert complete(text, tmp_path, "gate", "--output", "") == ["text", "json", "yaml"]
    assert complete(text, tmp_path, "launch", "--ep-backend", "deepep-") == ["deepep-nvshmem",
                                                                             "deepep-gin"]
    assert complete(text, tmp_path, "completion", "") == ["-h", "--help", "bash", "zsh"]
    assert "--from-cluster" in complete(text, tmp_path, "render", "--")
    assert complete(text, tmp_path, "teardown", "--config", "") == []  # bash then offers files
    assert "--width" not in complete(text, tmp_path, "gate", "--")  # hidden options stay hidden


def test_nested_subcommands_complete(tmp_path, capsys):
    parser = cli.build_parser()
    nested = [c for c in all_commands(parser) if c.count(" ") == 2]
    if not nested:
        pytest.skip("no command with subcommands is registered")
    parent = nested[0].split()[1]
    text = script("bash", capsys)
    offered = complete(text, tmp_path, parent, "")
    assert {c.split()[2] for c in nested if c.split()[1] == parent} <= set(offered)


def test_zsh_script_loads_the_bash_function_through_bashcompinit(tmp_path, capsys):
    text = script("zsh", capsys)
    assert "autoload -U +X bashcompinit && bashcompinit" in text
    assert "complete -o default -F _rlkit rlkit" in text
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here: `zsh -n` on the script did not run")
    path = tmp_path / "rlkit.zsh"
    path.write_text(text)
    subprocess.run(["zsh", "-n", str(path)], check=True)
    # As zsh's bashcompinit calls it: COMP_WORDS from 1, COMP_CWORD the bash-style index.
    program = (f"autoload -U compinit && compinit -u -d {tmp_path}/zcompdump; source {path}\n"
               "COMP_WORDS=(rlkit gate --output ''); COMP_CWORD=3; _rlkit rlkit '' --output\n"
               "print -l -- $COMPREPLY; echo SEP\n"
               "COMP_WORDS=(rlkit completion ''); COMP_CWORD=2; _rlkit rlkit '' completion\n"
               "print -l -- $COMPREPLY\n")
    proc = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True,
                          check=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    output, _, shells = proc.stdout.partition("SEP\n")
    assert output.split() == ["text", "json", "yaml"]
    assert shells.split() == ["-h", "--help", "bash", "zsh"]
