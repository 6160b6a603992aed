"""Deleting a checkpoint from S3 (retention, orphans): every version of it, in an order a crash
cannot turn into a complete-looking save. A mixin of ``S3CheckpointStore``, whose client, bucket,
keys, listings and retry policy it uses."""

from __future__ import annotations

from typing import Sequence

from .layout import iter_dirname, rollout_state_relpath
from .manifest import ManifestError

# DeleteObjects takes at most 1,000 keys (or versions) a request [botocore's S3 model, DeleteObjects:
# "The request can contain a list of up to 1,000 keys"]
DELETE_BATCH = 1000


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


def missing(exc: BaseException) -> bool:
    """Whether a download failed because the object (or the version asked for) does not exist.
    GetObject of a version that is gone answers 404 NoSuchVersion, of a key that is gone 404
    NoSuchKey; boto3's download_file sends a HeadObject first, and a HEAD error has no body, so
    only its status remains: "404" [S3 API reference via botocore's S3 model, HeadObject: "if the
    HEAD request generates an error, it returns a generic code, such as ... 404 Not Found"]. moto
    answers a HEAD of a version that is gone the same way (404)."""
    return error_code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchVersion")


class S3Deletion:
    """The delete side of ``S3CheckpointStore``."""

    def delete(self, iteration: int) -> int:
        """Delete one checkpoint for good: its manifest first, so that from then on no reader
        takes it for complete, then every version of every object under its directory and of its
        data cursor (``delete_objects``); returns how many object versions and delete markers went.
        A crash between the two leaves objects without a manifest, which ``orphans`` finds.

        On a versioned bucket a delete without a VersionId only adds a delete marker, and the
        object's bytes stay stored (and billed) as a noncurrent version until the bucket's
        lifecycle expires them [botocore's S3 model, DeleteObject: "To permanently delete an
        object in a versioned bucket, you must include the object's versionId"]: a pruned save
        would free nothing for storage.noncurrent_version_days. So only the manifest's own delete
        is by key (on a versioned bucket a delete marker, which hides the save at once whatever
        versions the key holds); what follows names each version: those the manifest pins (v3)
        and every other one S3 lists, a second writer's copies among them."""
        pinned = self._pinned_versions(iteration)  # read while the manifest is still there
        self.retry.call(f"delete the manifest of {iter_dirname(iteration)}", lambda: self.client.delete_object(
            Bucket=self.bucket, Key=self.manifest_key(iteration)))
        return self.delete_objects(iteration, pinned)

    def _pinned_versions(self, iteration: int) -> list[tuple[str, str]]:
        """(key, VersionId) of each object the manifest of ``iteration`` pins; none for a v1/v2
        manifest, a malformed one or one that is gone (the listing in ``delete_objects`` still
        finds every version)."""
        from botocore.exceptions import ClientError

        try:
            manifest = self.read_manifest(iteration)
        except ManifestError:
            return []
        except ClientError as exc:
            if missing(exc):
                return []
            raise
        return [(self.key(f.path), f.version_id) for f in manifest.files if f.version_id]

    def delete_objects(self, iteration: int, pinned: Sequence[tuple[str, str]] = ()) -> int:
        """Delete every version of what S3 holds under ``iteration``'s directory and of its data
        cursor, and ``pinned`` (key, VersionId) pairs; returns how many went. Also how the objects
        of a delete cut short (no manifest: ``orphans``) go.

        The order keeps a save that a crash cuts short from ever looking complete, and findable:
        first the noncurrent versions (the manifest's, under the delete marker ``delete`` just
        put, among them), then the current ones (the cursor's first), then the delete markers.
        While any object in the directory is still current, ``orphans`` lists the iteration and
        the next resume deletes the rest; the manifest key keeps its delete marker until no
        version of it is left under the marker, so it never becomes current again. A crash among
        the markers leaves only markers (no bytes).
        On an unversioned bucket S3 lists each object once, with VersionId "null", and deleting
        that version deletes the object."""
        from botocore.exceptions import ClientError

        cursor = self.key(rollout_state_relpath(iteration))
        try:
            # the cursor first: ``orphans`` finds a save by its directory, so a crash must leave
            # a current object there, not a cursor alone
            listed = [*(v for v in self._versions_under(cursor) if v[0] == cursor),
                      *self._versions_under(self.key(f"{iter_dirname(iteration)}/"))]
        except ClientError as exc:
            if error_code(exc) not in ("AccessDenied", "403"):
                raise
            # A role without s3:ListBucketVersions (a stack deployed before the trainer's role had
            # it, or a fork's own role): delete by key, as before, rather than fail the resume.
            self._log(f"listing the versions under {self.uri}{iter_dirname(iteration)}/ was refused "
                      f"({error_code(exc)}; the role needs s3:ListBucketVersions and s3:DeleteObjectVersion); "
                      "deleting by key: on a versioned bucket the deleted objects stay stored until the "
                      "bucket's lifecycle expires them")
            return self._delete_current(iteration)
        noncurrent = [(key, vid) for key, vid, latest, marker in listed if not marker and not latest]
        current = [(key, vid) for key, vid, latest, marker in listed if not marker and latest]
        markers = [(key, vid) for key, vid, _latest, marker in listed if marker]
        seen = set(noncurrent) | set(current)
        # a pinned version the listing does not show is gone already; S3 answers a delete of an
        # object it does not find as deleted [botocore's S3 model, DeleteObjects], so it is harmless
        noncurrent += [pv for pv in dict.fromkeys(pinned) if pv not in seen]
        for phase in (noncurrent, current, markers):
            self._delete_versions(iteration, phase)
        return len(noncurrent) + len(current) + len(markers)

    def _versions_under(self, prefix: str) -> list[tuple[str, str, bool, bool]]:
        """(key, VersionId, IsLatest, is a delete marker) of every version under ``prefix``: every
        page of one ListObjectVersions listing (retried as a whole)."""
        def _list() -> list[tuple[str, str, bool, bool]]:
            found: list[tuple[str, str, bool, bool]] = []
            markers: dict[str, str] = {}
            while True:
                page = self.client.list_object_versions(Bucket=self.bucket, Prefix=prefix, **markers)
                found += [(v["Key"], v["VersionId"], bool(v.get("IsLatest")), False) for v in page.get("Versions", [])]
                found += [(v["Key"], v["VersionId"], bool(v.get("IsLatest")), True)
                          for v in page.get("DeleteMarkers", [])]
                if not page.get("IsTruncated"):
                    return found
                markers = {"KeyMarker": page["NextKeyMarker"], "VersionIdMarker": page["NextVersionIdMarker"]}

        return self.retry.call(f"list the versions under s3://{self.bucket}/{prefix}", _list)

    def _delete_versions(self, iteration: int, versions: list[tuple[str, str]]) -> None:
        self._delete_batches(iteration, [{"Key": key, "VersionId": vid} for key, vid in versions])

    def _delete_current(self, iteration: int) -> int:
        """Delete by key (no VersionId) what ListObjectsV2 shows under ``iteration``'s directory, and its cursor."""
        keys = [*self._objects_under(self.key(f"{iter_dirname(iteration)}/")),
                self.key(rollout_state_relpath(iteration))]
        self._delete_batches(iteration, [{"Key": k} for k in keys])
        return len(keys)

    def _delete_batches(self, iteration: int, objects: list[dict]) -> None:
        """DeleteObjects in requests of at most ``DELETE_BATCH``, in order; any object S3 refuses stops it."""
        for start in range(0, len(objects), DELETE_BATCH):
            batch = objects[start:start + DELETE_BATCH]
            answer = self.retry.call(f"delete {len(batch)} object(s) of {iter_dirname(iteration)}",
                                     lambda batch=batch: self.client.delete_objects(
                                         Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}))
            if answer.get("Errors"):
                first = answer["Errors"][0]
                version = f" (version {first['VersionId']})" if first.get("VersionId") else ""
                raise RuntimeError(f"S3 refused to delete {len(answer['Errors'])} object(s) of "
                                   f"{iter_dirname(iteration)}, e.g. s3://{self.bucket}/{first.get('Key')}{version}: "
                                   f"{first.get('Code')} {first.get('Message', '')}".rstrip())

    def orphans(self) -> list[int]:
        """Iterations with objects in S3 but neither a manifest nor a quarantine marker: uploads
        under way or cut short, and deletes cut short. Which of them are safe to delete is the
        caller's decision (``Retention.prune_s3``)."""
        present, manifests, quarantined = self._saves()  # one listing, not one per object
        return sorted(present - manifests - quarantined)
