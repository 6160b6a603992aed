"""The CDK CLI commands the kit's messages and docs name, at the version the README pins.

app.py builds the built-in default config when `-c config=...` is missing (README, "Deploy to a
real account"), so a `cdk deploy` without it deploys, and bills for, a second environment: the
default one. Every command here names the config: the file when the caller knows it, else
``<your config file>``.

``--outputs-file`` writes only the outputs of the stacks that command deployed: the CLI collects
them in an object that starts empty and writes it over the file
[aws/aws-cdk-cli@a4c0282cccb8 (tag aws-cdk@v2.1138.0, the newest release in the snapshot read;
the pinned 2.1148.1 is later and could not be read here) packages/aws-cdk/lib/cli/cdk-toolkit.ts:
a new ``WorkGraphDeploymentActions`` per deploy (:577) whose ``stackOutputs`` starts as ``{}``
(:2257), then ``fs.writeJson(outputsFile, this.stackOutputs)`` (:2618-2620); the same at the
snapshot's head 7ff50e77f314 (2026-08-21) and, as ``const stackOutputs = {}``, at 0059d1b5bedc
(2025-07-08)]. A deploy of some stacks with the kit's outputs file would
leave a file without the others, so the command that writes it deploys ``--all``.
"""

from __future__ import annotations

from pathlib import Path

CDK_CLI = "npx aws-cdk@2.1148.1"  # the version the README pins
UNKNOWN_CONFIG = "<your config file>"
OUTPUTS_FILE = "cdk-outputs.json"


def cdk_command(verb: str, *args: str, config: str | Path | None = None) -> str:
    """``npx aws-cdk@<pin> <verb> <args> -c config=<config>``."""
    return " ".join([CDK_CLI, verb, *args, f"-c config={config or UNKNOWN_CONFIG}"])


def deploy_all_command(config: str | Path | None = None) -> str:
    """Deploy every stack of the config and write the whole outputs file (the README's form)."""
    return f"{cdk_command('deploy', '--all', config=config)} --outputs-file {OUTPUTS_FILE}"
