"""What each feature flag in cdk.json changes in the templates of every example.

    .venv/bin/python scripts/feature_flag_effects.py [FLAG ...]

For each flag (default: every flag in cdk.json), synthesizes every example with cdk.json's
context and again with that flag at the other choice (left unset, aws-cdk-lib's old behaviour;
for a flag kept off its recommendation, at the recommended value), and prints the resources,
properties and outputs that differ. Run it when upgrading aws-cdk-lib, before turning
a new recommended flag on: a flag that replaces a resource holding data (bucket, ECR repository,
KMS key, EKS cluster, file system) stays off, with its reason in stacks/feature_flags.py. Offline;
takes a few minutes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ["CDK_VALIDATION"] = "false"
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from aws_cdk import App  # noqa: E402

from infra.config import load_config  # noqa: E402
from stacks.feature_flags import NOT_RECOMMENDED, cdk_json_context, recommended_flags  # noqa: E402
from stacks.kit import build_stacks  # noqa: E402

SECTIONS = ("Outputs", "Parameters", "Conditions", "Mappings", "Rules")


def synth_all(context: dict, configs: dict) -> dict[str, dict]:
    """(example, stack) -> (template, stack tags) for every example."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for example, config in configs.items():
            app = App(outdir=f"{tmp}/{example}", context=context)
            build_stacks(app, config)
            for stack in app.synth().stacks:
                out[f"{example}/{stack.stack_name}"] = (stack.template, stack.tags)
    return out


def differences(before: dict, after: dict) -> list[str]:
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            lines.append(f"{key}: stack {'added' if key in after else 'removed'}")
            continue
        (t0, tags0), (t1, tags1) = before[key], after[key]
        if tags0 != tags1:
            lines.append(f"{key}: stack tags {tags0} -> {tags1}")
        r0, r1 = t0.get("Resources", {}), t1.get("Resources", {})
        for rid in sorted(set(r0) | set(r1)):
            if rid not in r0 or rid not in r1:
                kind = (r1.get(rid) or r0.get(rid))["Type"]
                lines.append(f"{key}: {'added' if rid in r1 else 'removed'} {rid} ({kind})")
            elif r0[rid] != r1[rid]:
                p0, p1 = r0[rid].get("Properties", {}), r1[rid].get("Properties", {})
                props = sorted(p for p in set(p0) | set(p1) if p0.get(p) != p1.get(p))
                other = sorted(k for k in set(r0[rid]) | set(r1[rid])
                               if k != "Properties" and r0[rid].get(k) != r1[rid].get(k))
                lines.append(f"{key}: changed {rid} ({r0[rid]['Type']}) {props + other}")
        lines += [f"{key}: {s} differ" for s in SECTIONS if t0.get(s) != t1.get(s)]
    return lines


def main(flags: list[str]) -> int:
    context, recommended = cdk_json_context(), recommended_flags()
    configs = {p.stem: load_config(p) for p in sorted((REPO_ROOT / "examples").glob("*.yaml"))}
    current = synth_all(context, configs)
    for flag in flags or [k for k in context if k.startswith("@aws-cdk")]:
        other = {k: v for k, v in context.items() if k != flag}
        against = "unset"
        if flag in NOT_RECOMMENDED:
            other[flag] = recommended[flag]
            against = f"the recommended {recommended[flag]!r}"
        lines = differences(synth_all(other, configs), current)
        print(f"{flag} = {context.get(flag)!r}: " + (f"{len(lines)} difference(s) from {against}"
                                                      if lines else f"same as {against}"))
        for line in lines:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
