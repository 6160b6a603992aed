"""What listing a run's saves costs as the run goes on: the markers (``_COMPLETE.json``,
``_QUARANTINED.json``) are read by every resume, every ``rltrainer checkpoint list`` and the
upload watcher's first scan, and a run keeps every save by default (``keep_s3`` 0). A listing of
every object under ``iter_`` grew with every torch_dist shard of every save; now it grows with
the number of saves only, and a store that does not apply the delimiter still gets the answer."""

from __future__ import annotations

import io

import pytest

from ckpt_helpers import moto_s3
from rltrainer.checkpoints import RetryPolicy, S3CheckpointStore
from rltrainer.checkpoints.layout import MANIFEST_NAME, QUARANTINE_MARKER, SHARDS_DELIMITER

BUCKET = "ckpt-bucket"
pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")


@pytest.fixture
def s3(monkeypatch):
    yield from moto_s3(monkeypatch)


class ListCounter:
    """Wraps the S3 client: each ListObjectsV2 request and how many entries (keys and common
    prefixes) it returned. ``rewrite`` may change a request first (a store that differs from S3)."""

    def __init__(self, client, rewrite=None):
        self._client, self.rewrite = client, rewrite
        self.lists: list[tuple[dict, int]] = []

    def list_objects_v2(self, **kwargs):
        if self.rewrite:
            kwargs = self.rewrite(kwargs)
        page = self._client.list_objects_v2(**kwargs)
        self.lists.append((kwargs, len(page.get("Contents", [])) + len(page.get("CommonPrefixes", []))))
        return page

    def reset(self) -> None:
        self.lists.clear()

    def __getattr__(self, name):
        return getattr(self._client, name)


def store(client, run: str, log: io.StringIO | None = None) -> S3CheckpointStore:
    return S3CheckpointStore(f"s3://{BUCKET}/{run}/", client=client, progress_stream=log or io.StringIO(),
                             retry=RetryPolicy(sleep=lambda s: None, log=io.StringIO(), max_attempts=1))


def put_run(client, run: str, saves: int, shards: int) -> dict[str, list[int]]:
    """A run laid out as the store writes it: per save the torch_dist shards, ``.metadata``,
    Megatron's ``metadata.json`` and ``common.pt``, the data cursor and a manifest; the fourth
    save is quarantined, and the last one was cut short (no manifest). Markers are not parsed by
    the listing, so their bodies are placeholders. The shards go into moto's backend directly:
    thousands of PutObject requests through botocore take half a minute."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    iterations = [10 * (i + 1) for i in range(saves)]
    quarantined, cut_short = iterations[3], iterations[-1]
    for it in iterations:
        for rank in range(shards):
            backend.put_object(BUCKET, f"{run}/iter_{it:07d}/__{rank}_0.distcp", b"x")
        names = [".metadata", "metadata.json", "common.pt"]
        names += [] if it == cut_short else [MANIFEST_NAME]
        names += [QUARANTINE_MARKER] if it == quarantined else []
        for name in names:
            client.put_object(Bucket=BUCKET, Key=f"{run}/iter_{it:07d}/{name}", Body=b"x")
        client.put_object(Bucket=BUCKET, Key=f"{run}/rollout/global_dataset_state_dict_{it}.pt", Body=b"x")
    return {"complete": [i for i in iterations if i not in (quarantined, cut_short)],
            "quarantined": [quarantined], "orphans": [cut_short]}


def test_listing_the_saves_does_not_grow_with_their_shards(s3):
    """Before: 30 saves of 300 shards made each ``list_complete`` 10 LIST requests returning
    9,000+ keys, and ``orphans`` the same plus one more listing; a week of saves of thousands
    of shards is tens of thousands of keys on every resume. Now one request each, the same few
    entries per save whether a save has 1 shard or 300."""
    saves = 30
    expected = put_run(s3, "big", saves, shards=300)
    assert put_run(s3, "small", saves, shards=1) == expected
    client = ListCounter(s3)
    entries = {}
    for run in ("big", "small"):
        st = store(client, run)
        client.reset()
        assert st.list_complete() == expected["complete"]
        assert len(client.lists) == 1, len(client.lists)
        entries[run] = client.lists[0][1]
        client.reset()
        assert st.orphans() == expected["orphans"]
        assert st.list_quarantined() == expected["quarantined"]
        assert [n for _, n in client.lists] == [entries[run]] * 2  # one listing each, no second one
    assert entries["big"] == entries["small"], entries
    assert entries["big"] <= 6 * saves  # three files, two markers at most and one common prefix a save


def test_is_complete_asks_about_one_save_only(s3):
    """``is_complete`` (resume, for the save the tracker points at) listed the whole run; now one
    LIST of that save's markers, whatever the run or the save holds."""
    expected = put_run(s3, "r", 12, shards=300)
    client = ListCounter(s3)
    st = store(client, "r")
    for it, want in ((expected["complete"][0], True), (expected["quarantined"][0], False),
                     (expected["orphans"][0], False), (9990, False)):
        client.reset()
        assert st.is_complete(it) is want
        assert len(client.lists) == 1 and client.lists[0][1] <= 3, client.lists


def test_every_page_is_followed(s3):
    """Keys and common prefixes share the 1,000-entry page: a run with more saves than a page
    holds is listed to its end (here pages of 7 entries)."""
    expected = put_run(s3, "r", 12, shards=20)
    client = ListCounter(s3, rewrite=lambda kw: {**kw, "MaxKeys": 7})
    st = store(client, "r")
    assert st.list_complete() == expected["complete"]
    assert len(client.lists) > 5
    assert st.orphans() == expected["orphans"]
    assert st.list_quarantined() == expected["quarantined"]


def test_shard_and_marker_names_against_the_delimiter():
    """The listing is right only while no marker contains the delimiter and every shard does."""
    for marker in (MANIFEST_NAME, QUARANTINE_MARKER):
        assert SHARDS_DELIMITER not in f"iter_0000010/{marker}"
    assert "iter_0000010/__0_0.distcp".startswith(f"iter_0000010{SHARDS_DELIMITER}")


@pytest.mark.parametrize("store_kind", ["rolls-up-at-slash", "refuses"])
def test_a_store_that_does_not_apply_the_delimiter_still_gets_the_markers(s3, store_kind):
    """A store that rolled keys up at "/" alone would hide every marker in ``iter_N/``, and a
    resume would find no save; one that refused the delimiter would fail the resume. Either
    way the store lists every object instead, says so once, and does not try the delimiter again."""
    from botocore.exceptions import ClientError

    expected = put_run(s3, "r", 6, shards=5)

    def rewrite(kwargs):
        if kwargs.get("Delimiter") != SHARDS_DELIMITER:
            return kwargs
        if store_kind == "refuses":
            raise ClientError({"Error": {"Code": "InvalidArgument", "Message": "Invalid delimiter"}},
                              "ListObjectsV2")
        return {**kwargs, "Delimiter": "/"}

    client = ListCounter(s3, rewrite=rewrite)
    log = io.StringIO()
    st = store(client, "r", log)
    assert st.list_complete() == expected["complete"]
    assert st.orphans() == expected["orphans"]
    assert log.getvalue().count(f"the delimiter {SHARDS_DELIMITER!r}") == 1, log.getvalue()
    assert "listing every object instead" in log.getvalue()
    assert [kw.get("Delimiter") for kw, _ in client.lists][-1] is None


def test_other_list_errors_are_not_taken_for_an_unsupported_delimiter(s3):
    from botocore.exceptions import ClientError

    put_run(s3, "r", 6, shards=1)

    def deny(kwargs):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "ListObjectsV2")

    with pytest.raises(ClientError, match="AccessDenied"):
        store(ListCounter(s3, rewrite=deny), "r").list_complete()


def test_a_pod_start_lists_the_run_once(s3, tmp_path):
    """prepare_resume listed the run three times: for the start point, again for the pruning, and
    once more for the orphans (keep_s3). Now the first listing answers all three, and the pruning
    still counts the marker this start wrote: the newest save in S3 is bad (quarantined during
    the restore) and the next one is restored; with keep_s3 2 both good saves stay (taken for
    complete, the bad one would push the oldest out), an older cut-short upload is deleted, and
    the quarantined save above the start stays."""
    from ckpt_helpers import make_save
    from rltrainer.checkpoints import Retention, prepare_resume

    run = "r"
    client = ListCounter(s3)
    st = store(client, run)
    written = tmp_path / "written"
    for it in (10, 20):
        make_save(written, it, seed=it)
        st.upload(written, it)
    s3.put_object(Bucket=BUCKET, Key=f"{run}/iter_0000030/__0_0.distcp", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key=f"{run}/iter_0000030/{MANIFEST_NAME}", Body=b"not json")
    s3.put_object(Bucket=BUCKET, Key=f"{run}/iter_0000005/__0_0.distcp", Body=b"x")  # cut short
    client.reset()
    log = io.StringIO()
    result = prepare_resume(st, tmp_path / "pod", log=log, retention=Retention(keep_local=1, keep_s3=2))
    assert (result.iteration, result.source, result.skipped) == (20, "s3", [30]), log.getvalue()
    run_listings = [kw for kw, _ in client.lists if kw["Prefix"] == f"{run}/iter_"]
    assert len(run_listings) == 1, run_listings
    keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{run}/")
            for o in page.get("Contents", [])}
    saves = sorted({k.split("/")[1] for k in keys if k.split("/")[1].startswith("iter_")})
    assert saves == ["iter_0000010", "iter_0000020", "iter_0000030"], saves
    assert f"{run}/iter_0000030/{QUARANTINE_MARKER}" in keys
    assert st.list_complete() == [10, 20]
