"""Where a checkpoint lives: Megatron's directory and tracker names, Miles' data cursor, and
the markers the sync writes beside a save."""

from __future__ import annotations

import re


TRACKER_FILE = "latest_checkpointed_iteration.txt"
MANIFEST_NAME = "_COMPLETE.json"
QUARANTINE_MARKER = "_QUARANTINED.json"
LOCAL_QUARANTINE_DIR = "_quarantine"
MANIFEST_FORMAT = "rltrainer.checkpoint/v2"
# v2 plus each object's S3 VersionId: written when the bucket is versioned, so that restore reads
# exactly the objects the manifest describes even if a second writer later puts the same keys.
VERSIONED_MANIFEST_FORMAT = "rltrainer.checkpoint/v3"
LEGACY_MANIFEST_FORMAT = "rltrainer.checkpoint/v1"  # sha256 per file; still restorable
CHECKSUM_ALGORITHM = "CRC32"
ITER_DIR = re.compile(r"^iter_(\d{7})$")
MARKER_KEY = re.compile(r"iter_(\d{7})/(" + re.escape(MANIFEST_NAME) + "|" + re.escape(QUARANTINE_MARKER) + r")$")
# Listing a run with this delimiter rolls each save's torch_dist shards (``__<rank>_<n>.distcp``,
# megatron-lm 37f9161 dist_checkpointing/strategies/filesystem_async.py ``_StoragePrefix``) into one
# CommonPrefix, ``iter_N/__``; the markers (one "_", then a capital) are never rolled up. S3 rolls
# keys up at "the next occurrence of the string specified by a delimiter" [botocore 1.44.8 S3 model,
# ListObjectsV2 CommonPrefixes]; its request field is documented as "a character", and directory
# buckets take "/" only, so the store checks the answer and lists plainly where it is not applied.
SHARDS_DELIMITER = "/__"
STAGING_DIR = "_restore_staging"
PRUNING_DIR = "_pruning"  # saves being deleted (retention): renamed here first, then removed
INPUTS_DIR = "_inputs"  # s3:// inputs staged for the run (rltrainer.staging); never a save


def iter_dirname(iteration: int) -> str:
    """Megatron's directory name for a save: ``iter_`` and seven digits."""
    return f"iter_{iteration:07d}"


def rollout_state_relpath(iteration: int) -> str:
    """Where Miles keeps the data-cursor state that belongs to a save."""
    return f"rollout/global_dataset_state_dict_{iteration}.pt"
