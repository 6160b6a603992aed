"""``rltrainer checkpoint``: the S3 checkpoint sync, by hand.

The launcher does all of this on its own; these subcommands are for operators:
look at what a run has in S3, push a save the launcher could not upload, or pull
the newest complete checkpoint onto a volume before a manual run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence, TextIO

from .checkpoints import (
    IncompleteCheckpoint,
    ManifestError,
    RetryPolicy,
    S3CheckpointStore,
    iter_dirname,
    prepare_resume,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rltrainer checkpoint", description="The S3 checkpoint sync, by hand.")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="print the complete checkpoints in S3 as JSON lines")
    up = sub.add_parser("upload", help="upload one finished save and mark it complete")
    up.add_argument("--iteration", type=int, required=True, help="the N of iter_000000N")
    rs = sub.add_parser("restore", help="make --local-dir hold the newest complete checkpoint (what launch does first)")
    for q in (ls, up, rs):
        q.add_argument("--s3-uri", required=True, help="the run's checkpoint prefix, s3://bucket/prefix/")
    for q in (up, rs):
        q.add_argument("--local-dir", default="/checkpoints", help="Megatron --save directory (default /checkpoints)")
        q.add_argument("--no-data-cursor", action="store_true",
                       help="the run's saves carry no Miles data cursor (its model.megatron_args has "
                            "--disable-rollout-global-dataset); without this a save is whole only with its cursor")
    return p


def upload_command(s3_uri: str, local_dir: str, iteration: str, *, data_cursor: bool) -> str:
    """The ``rltrainer checkpoint upload`` command line for one save of a run whose saves do (or,
    with ``data_cursor`` False, do not) carry Miles' data cursor: what the launcher prints after a
    failed final upload, so that it asks of the save exactly what the launcher's own upload did."""
    return (f"rltrainer checkpoint upload --s3-uri {s3_uri} --local-dir {local_dir} --iteration {iteration}"
            + ("" if data_cursor else " --no-data-cursor"))


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None,
         client=None) -> int:
    """List, upload or restore the S3 checkpoints of one run."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    # A run without the global dataset writes no data cursor (rltrainer.miles.saves_data_cursor);
    # requiring one would refuse its saves and set them aside as torn at a restore.
    store = S3CheckpointStore(args.s3_uri, client=client, retry=RetryPolicy(log=err), progress_stream=err,
                              require_data_cursor=not getattr(args, "no_data_cursor", False))
    if args.action == "list":
        for iteration in store.list_complete():
            try:
                m = store.read_manifest(iteration)
            except ManifestError as exc:  # listed, not quarantined: that is restore's decision
                out.write(json.dumps({"iteration": iteration, "error": str(exc)}) + "\n")
                continue
            out.write(json.dumps({"iteration": iteration, "files": len(m.files), "total_bytes": m.total_bytes,
                                  "created_at": m.created_at}) + "\n")
        return 0
    if args.action == "upload":
        try:
            result = store.upload(args.local_dir, args.iteration)
        except IncompleteCheckpoint as exc:
            print(f"rltrainer checkpoint upload: {exc}", file=err)
            return 2
        if result.manifest is not None:
            print(f"rltrainer: {iter_dirname(result.iteration)} complete in {store.uri} "
                  f"({len(result.manifest.files)} files)", file=err)
        return 0
    result = prepare_resume(store, args.local_dir, log=err)
    out.write(json.dumps({"iteration": result.iteration, "source": result.source}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
