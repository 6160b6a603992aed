"""Checkpoints to and from S3: never torn, never overwritten, never a bad one restored.

Layout. Megatron (and therefore Miles) saves into ``--save``::

    <local_dir>/latest_checkpointed_iteration.txt          # Megatron: written after a save completes
    <local_dir>/iter_0000020/...                            # one directory per save
    <local_dir>/rollout/global_dataset_state_dict_20.pt     # Miles' data cursor for that save

Megatron's torch_dist format writes one ``__<rank>_<n>.distcp`` per writer and, once every
writer is done, ``.metadata`` listing them all (Megatron-LM 37f9161
``megatron/core/dist_checkpointing/strategies/filesystem_async.py``). Miles v0.1.0 writes the
data cursor *after* the model save, tracker included: ``train.py`` ``save()`` awaits
``save_model`` and then ``rollout_manager.save`` (``miles/ray/rollout/rollout_manager.py``
``save`` -> ``miles/rollout/data_source.py`` ``save``, a plain ``torch.save``). On resume Miles
loads the cursor of the loaded iteration (``miles/ray/placement_group.py``:
``rollout_manager.load(start_rollout_id - 1)``). So a save is complete only when the tracker
has reached it *and* its cursor is a whole file: without the cursor, a resume silently starts
the prompt data over.

S3 mirrors the same relative paths under the run's prefix, plus one manifest per
checkpoint, written last::

    s3://bucket/prefix/iter_0000020/...                      # every file of the save
    s3://bucket/prefix/rollout/global_dataset_state_dict_20.pt
    s3://bucket/prefix/iter_0000020/_COMPLETE.json           # files, sizes, S3 CRC32 checksums
    s3://bucket/prefix/iter_0000020/_QUARANTINED.json        # only if restore found it bad

Rules:

- A checkpoint exists in S3 only once its ``_COMPLETE.json`` does and no ``_QUARANTINED.json``
  sits beside it. An upload that dies half way leaves files but no manifest; the next upload of
  that save sends only the files S3 does not already hold with the same size and checksum.
- A complete checkpoint is never written again: an uploader that finds the manifest skips
  the whole iteration, checks again before every file, and writes the manifest with a
  conditional put (``If-None-Match: *``), so of two writers only the first one publishes.
- Checksums are S3's own (``ChecksumAlgorithm=CRC32``): botocore computes them while it sends
  each request and S3 checks them on arrival, so an upload reads the data once. A single-part
  object carries the CRC32 of the whole object; a multipart one the CRC32 of its parts' CRC32s
  (S3 "composite"), which the manifest records with the part size.
- Restore verifies every file's size and checksum in a staging directory, moves them into
  place and only then writes Megatron's tracker. A checkpoint with a malformed manifest or a
  missing or corrupt file is quarantined (a marker, nothing deleted) and restore falls back
  to the next-newest complete one.
- Before a restore, local iteration directories (and cursors) above the tracker -- saves that
  were being written when the pod died -- are moved to ``<local_dir>/_quarantine/``, so a torn
  save is never published later.

- On a versioned bucket the manifest (format v3) records each object's S3 VersionId and
  restore downloads exactly those versions: a second writer that puts the same keys after the
  manifest exists cannot change what a restore reads.
- Locally, saves that S3 holds complete (or never will: their number is quarantined there and a
  newer save is complete) are deleted beyond the newest ``keep_local``, and
  quarantined torn saves are bounded (``retention``), so a run that saves for days stays
  inside the file system the kit sized for it.

The package, by concern: ``layout`` (names and paths), ``retry`` (which S3 errors to retry),
``progress``, ``manifest`` (``_COMPLETE.json`` and checksums), ``local`` (the tracker, whole
and torn saves), ``store`` (``S3CheckpointStore``), ``resume`` (``prepare_resume``,
``CheckpointWatcher``), ``retention`` (what stays on the local file system), ``space`` (room
for the next saves before training, other runs' directories counted), ``stripe`` (Lustre
striping of the checkpoint directory).
"""

from .layout import (
    CHECKSUM_ALGORITHM,
    LEGACY_MANIFEST_FORMAT,
    LOCAL_QUARANTINE_DIR,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    QUARANTINE_MARKER,
    VERSIONED_MANIFEST_FORMAT,
    TRACKER_FILE,
    iter_dirname,
    rollout_state_relpath,
)
from .local import (
    check_local_save,
    checkpoint_files,
    local_cursor_iterations,
    local_iterations,
    missing_shards,
    quarantine_above_tracker,
    quarantine_local,
    read_tracker,
    write_tracker,
)
from .manifest import (
    CorruptCheckpoint,
    FileEntry,
    IncompleteCheckpoint,
    Manifest,
    ManifestError,
    NewerManifestFormat,
    entry_matches,
    s3_crc32,
    sha256_file,
)
from .progress import Progress, human_bytes
from .resume import CheckpointWatcher, ResumeResult, prepare_resume
from .retention import Retention
from .space import check_room
from .retry import RETRYABLE_CODES, RetryPolicy, is_retryable
from .store import S3CheckpointStore, UploadResult
from .stripe import stripe_across_targets

__all__ = [
    "CHECKSUM_ALGORITHM",
    "LEGACY_MANIFEST_FORMAT",
    "LOCAL_QUARANTINE_DIR",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "QUARANTINE_MARKER",
    "RETRYABLE_CODES",
    "TRACKER_FILE",
    "CheckpointWatcher",
    "CorruptCheckpoint",
    "FileEntry",
    "IncompleteCheckpoint",
    "Manifest",
    "ManifestError",
    "NewerManifestFormat",
    "Progress",
    "ResumeResult",
    "Retention",
    "RetryPolicy",
    "S3CheckpointStore",
    "UploadResult",
    "VERSIONED_MANIFEST_FORMAT",
    "check_local_save",
    "check_room",
    "checkpoint_files",
    "entry_matches",
    "human_bytes",
    "is_retryable",
    "iter_dirname",
    "local_cursor_iterations",
    "local_iterations",
    "missing_shards",
    "prepare_resume",
    "quarantine_above_tracker",
    "quarantine_local",
    "read_tracker",
    "rollout_state_relpath",
    "s3_crc32",
    "sha256_file",
    "stripe_across_targets",
    "write_tracker",
]
