"""A stack-outputs error names only the calling command's own flags and the real config file:
gate, launch and image build have --outputs but no --from-stacks (they read CloudFormation when
--outputs is left out), and the `cdk deploy` in a fix names the config, not a placeholder."""

from __future__ import annotations

import argparse
import re

import pytest

from ops import cli
from tests.support import REPO_ROOT

COMMANDS = {"gate": ["gate"], "launch": ["launch", "--force"], "image build": ["image", "build"]}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
CDK = re.compile(r"`npx aws-cdk[^`]*`")  # the cdk command's own flags (--all, --outputs-file)


def flags_of(words: list[str]) -> set[str]:
    parser = cli.build_parser(words[0])
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and word in sub.choices:
            parser = sub.choices[word]
    return {s for a in parser._actions for s in a.option_strings}


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "RLKIT_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "team.yaml"
    cfg.write_text((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    return cfg


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("outputs", [["--outputs", "nosuch.json"], []],
                         ids=["missing-outputs-file", "no-credentials"])
def test_outputs_errors_name_only_the_command_s_flags(command, outputs, no_credentials, tmp_path,
                                                      capsys):
    words = COMMANDS[command]
    extra = ["--state-dir", str(tmp_path / "state")] if command != "image build" else []
    code = cli.main([*words, "--config", str(no_credentials), *extra, *outputs])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 2, text
    fix = text[text.index("Fix:"):]
    used = set(FLAG.findall(CDK.sub("", fix)))
    assert used <= flags_of(words), (command, used - flags_of(words), fix)
    assert "<your config file>" not in fix
    if outputs:  # the deploy that writes the file names this config
        assert f"-c config={no_credentials} " in fix and "--from-stacks" not in fix
        assert f"`rlkit {command} --config {no_credentials}` without --outputs" in fix
    elif command != "image build":  # image build reads the data stack itself (its own message)
        assert f"`rlkit {command} --config {no_credentials} --outputs cdk-outputs.json`" in fix


def test_render_still_offers_its_from_stacks(no_credentials, capsys):
    assert cli.main(["render", "--config", str(no_credentials), "--outputs", "nosuch.json"]) == 2
    err = capsys.readouterr().err
    assert f"or run `rlkit render --config {no_credentials} --from-stacks`" in err
