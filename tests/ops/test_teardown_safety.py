"""`rlkit teardown` refuses to lose or strand what it cannot delete whole, counts what a kept stack
holds as kept, and reports an unfinished teardown as unfinished (moto, fakes where moto lacks an
API)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from ops.teardown import TeardownError, delete_images
from ops.teardown_leftovers import belongs_to
from tests.support.teardown import (  # noqa: F401 (aws: autouse fixture)
    DATA, REGION, Recording, aws, fill_bucket, live_names, make_env, make_stack, run)

TAG = {"rlkit:environment": "tt"}


def versions(bucket: str) -> int:
    listing = boto3.client("s3", region_name=REGION).list_object_versions(Bucket=bucket)
    return len(listing.get("Versions", [])) + len(listing.get("DeleteMarkers", []))


# --- what a kept or deleted stack keeps ----------------------------------------------------------


def test_a_kept_data_stacks_log_group_and_project_are_kept_on_purpose(tmp_path, capsys):
    """The data stack's build log group (and CodeBuild project) carry the environment tag too:
    with the data kept, a clean teardown listed them as leftovers and exited 1."""
    make_env(data={**DATA, "BuildLogs": {"Type": "AWS::Logs::LogGroup",
                                         "Properties": {"LogGroupName": "tt-image-build"}}})
    boto3.client("logs", region_name=REGION).tag_log_group(logGroupName="tt-image-build",
                                                           tags=TAG)
    code, _ = run(tmp_path, "--yes")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "kept on purpose: arn:aws:logs:us-east-1:123456789012:log-group:tt-image-build" in out
    assert "Teardown complete." in out


def test_a_key_the_deleted_data_stack_retains_is_kept_on_purpose(tmp_path, capsys):
    kms = boto3.client("kms", region_name=REGION)
    make_env(data={**DATA, "Key": {"Type": "AWS::KMS::Key", "DeletionPolicy": "Retain",
                                   "Properties": {"KeyPolicy": {}}}})
    cfn = boto3.client("cloudformation", region_name=REGION)
    key = next(r["PhysicalResourceId"] for r in cfn.list_stack_resources(
        StackName="tt-data")["StackResourceSummaries"] if r["LogicalResourceId"] == "Key")
    kms.tag_resource(KeyId=key, Tags=[{"TagKey": "rlkit:environment", "TagValue": "tt"}])
    code, _ = run(tmp_path, "--yes", "--delete-data")
    out = capsys.readouterr().out
    assert code == 0, out
    assert ("kept on purpose (retained by the stack's policy): "
            f"arn:aws:kms:us-east-1:123456789012:key/{key}") in out


# --- a file system the deployed stack still retains ----------------------------------------------

RETAINED_FS = {"Fs": {"Type": "AWS::FSx::FileSystem", "DeletionPolicy": "Retain",
                      "Properties": {"FileSystemType": "LUSTRE"}}, **{"T": {"Type": "AWS::SNS::Topic"}}}


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")  # moto creates no file system
def test_storage_retain_false_not_yet_deployed_keeps_the_file_system_and_its_network(
        tmp_path, capsys):
    """The config says the file system may go, the deployed stack still retains it: deleting the
    stack left the file system billing outside any stack and its interfaces in the VPC."""
    ids = make_env()
    make_stack("tt-storage", "tt", RETAINED_FS)
    fill_bucket(ids["Bucket"])
    code, cfn = run(tmp_path, "--yes", "--delete-data",
                    config_text="name: tt\nstorage: {retain: false}\n")
    captured = capsys.readouterr()
    assert code == 1, captured.out
    assert cfn.deleted == ["tt-gpu-p5", "tt-cluster"]
    assert live_names() == ["tt-data", "tt-network", "tt-storage"]
    assert ("warning: not deleting tt-storage: the deployed file system still has DeletionPolicy "
            "Retain (the config's storage.retain: false or ephemeral: true was not deployed yet), "
            "so CloudFormation would leave it billing outside any stack. Fix: npx "
            f"aws-cdk@2.1148.1 deploy --exclusively tt-storage -c config={tmp_path / 'c.yaml'}, "
            "then run teardown again.") in captured.err
    assert "Not complete" in captured.err and "Teardown complete." not in captured.out
    assert versions(ids["Bucket"]) == 3  # the data the file system links to is untouched


# --- a stack outside the plan that imports the data stack ----------------------------------------

def make_env_exporting():
    """The data stack exports its bucket, as the kit's does to the stacks that use it."""
    return make_env(data_outputs={"Bucket": {"Value": {"Ref": "Bucket"},
                                             "Export": {"Name": "tt-data:Bucket"}}})


def test_data_imported_by_a_stack_outside_the_plan_is_neither_emptied_nor_deleted(
        tmp_path, capsys):
    """CloudFormation refuses to delete a stack whose export is in use, and says so only after the
    delete was asked for: teardown had emptied the bucket by then, under a running consumer."""
    ids = make_env_exporting()
    fill_bucket(ids["Bucket"])
    cfn = Recording(boto3.client("cloudformation", region_name=REGION))
    cfn.imports = {"tt-data:Bucket": ["team-notebooks"]}
    code, _ = run(tmp_path, "--yes", "--delete-data", cfn=cfn)
    captured = capsys.readouterr()
    assert code == 1, captured.out
    assert "tt-data" not in cfn.deleted and "tt-network" in cfn.deleted
    assert versions(ids["Bucket"]) == 3
    assert ("warning: not deleting tt-data: team-notebooks still import(s) its outputs (e.g. "
            "tt-data:Bucket), so CloudFormation would refuse to delete it after teardown had "
            "emptied its bucket and repository. Fix: delete team-notebooks (or remove the "
            "imports), then run teardown again.") in captured.err


def test_an_import_that_appears_during_the_teardown_stops_it_before_emptying(tmp_path, capsys):
    ids = make_env_exporting()
    fill_bucket(ids["Bucket"])

    class LateImporter(Recording):
        def list_imports(self, ExportName):  # noqa: N803
            self.imports = {"tt-data:Bucket": ["team-notebooks"]} if self.deleted else {}
            return super().list_imports(ExportName=ExportName)

    cfn = LateImporter(boto3.client("cloudformation", region_name=REGION))
    code, _ = run(tmp_path, "--yes", "--delete-data", cfn=cfn)
    assert code == 1
    assert "error: not emptying or deleting tt-data: team-notebooks still import(s)" in \
        capsys.readouterr().err
    assert "tt-data" not in cfn.deleted and versions(ids["Bucket"]) == 3


def test_an_export_nobody_imports_lets_the_data_go(tmp_path, capsys):
    make_env_exporting()
    code, cfn = run(tmp_path, "--yes", "--delete-data")
    assert code == 0, capsys.readouterr().out
    assert cfn.deleted[-1] == "tt-data"


# --- images a multi-arch index still lists -------------------------------------------------------


class Ecr:
    """ECR's image deletion rule: an image an index lists goes only after that index."""

    def __init__(self, children: dict[str, list[str]], refuse: str | None = None):
        self.images = set(children) | {c for cs in children.values() for c in cs}
        self.children, self.refuse, self.calls = children, refuse, 0

    def get_paginator(self, name):
        assert name == "list_images"
        ids = [{"imageDigest": d} for d in sorted(self.images)]
        return type("P", (), {"paginate": lambda _self, **kw: [{"imageIds": ids}]})()

    def batch_delete_image(self, repositoryName, imageIds):  # noqa: N803
        self.calls += 1
        deleted, failures = [], []
        for i in imageIds:
            d = i["imageDigest"]
            listed = any(d in self.children.get(p, []) for p in self.images)
            if d == self.refuse:
                failures.append({"imageId": i, "failureCode": "KmsError", "failureReason": "no"})
            elif listed:
                failures.append({"imageId": i, "failureCode": "ImageReferencedByManifestList",
                                 "failureReason": "listed by an index"})
            else:
                deleted.append(i)
        self.images -= {i["imageDigest"] for i in deleted}
        return {"imageIds": deleted, "failures": failures}


def test_images_an_index_lists_are_deleted_after_it():
    """Children sort before their index here, so the first call refuses them: they are deleted
    once the index is gone. Before, failures were not read and the repository stayed non-empty
    (CloudFormation's delete of it then failed, after the bucket had been emptied)."""
    ecr = Ecr({"sha256:f-index": ["sha256:a-amd64", "sha256:b-arm64"]})
    assert delete_images(ecr, "tt-trainer") == 3
    assert ecr.images == set() and ecr.calls == 2


def test_an_image_ecr_will_not_delete_stops_the_teardown_naming_it():
    ecr = Ecr({"sha256:f-index": ["sha256:a-amd64"]}, refuse="sha256:f-index")
    with pytest.raises(TeardownError, match=r"could not delete image sha256:f-index \(KmsError: "
                       r"no\)\. Fix: delete it by hand"):
        delete_images(ecr, "tt-trainer")


def test_a_dry_run_counts_images_and_deletes_none():
    ecr = Ecr({"sha256:f-index": ["sha256:a-amd64"]})
    assert delete_images(ecr, "tt-trainer", dry_run=True) == 2 and ecr.calls == 0


# --- leftovers the tagging API still lists for a while -------------------------------------------


def test_a_leftover_that_the_tagging_api_drops_soon_is_not_one(tmp_path, capsys):
    make_env()
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="stray-tt")
    s3.put_bucket_tagging(Bucket="stray-tt", Tagging={"TagSet": [
        {"Key": "rlkit:environment", "Value": "tt"}]})
    slept = []

    def sleep(seconds):  # the resource is gone from the listing after the first wait
        slept.append(seconds)
        s3.delete_bucket(Bucket="stray-tt")

    code, _ = run(tmp_path, "--yes", sleep=sleep)
    out = capsys.readouterr().out
    assert code == 0, out
    assert slept == [30]
    assert "1 resource(s) still tagged rlkit:environment=tt; the tagging API lags deletions, " \
           "reading again in 30 s (up to 180 s more)" in out
    assert "Teardown complete." in out


# --- an unfinished teardown says so --------------------------------------------------------------


def test_a_dry_run_with_a_refused_stack_exits_as_the_real_run_would(tmp_path, capsys):
    make_env()
    make_stack("tt-storage", None)  # one of this environment's names, without its tag
    code, cfn = run(tmp_path, "--dry-run")
    captured = capsys.readouterr()
    assert code == 1 and cfn.deleted == []
    assert "warning: not deleting tt-storage: it has no rlkit:environment tag" in captured.err
    code, _ = run(tmp_path, "--yes")
    captured = capsys.readouterr()
    assert code == 1 and "Teardown complete." not in captured.out


def test_name_without_account_refuses(tmp_path, capsys):
    make_env()
    code, cfn = run(tmp_path, "--yes", "--name", "tt", "--region", REGION)
    assert code == 2 and cfn.deleted == []
    assert ("error: --name tt needs --account (the region its stacks are in and the account they "
            "belong to; teardown refuses credentials for any other account); nothing deleted"
            in capsys.readouterr().err)


def test_name_with_another_account_refuses(tmp_path, capsys):
    make_env()
    code, cfn = run(tmp_path, "--yes", "--name", "tt", "--region", REGION,
                    "--account", "999999999999")
    assert code == 2 and cfn.deleted == []
    assert ("these credentials are for account 123456789012, but the config's account is "
            "999999999999; nothing deleted" in capsys.readouterr().err)
    code, cfn = run(tmp_path, "--yes", "--name", "tt", "--region", REGION,
                    "--account", "123456789012")
    assert code == 0 and "tt-cluster" in cfn.deleted


def test_end_of_input_at_the_prompt_is_not_a_confirmation(tmp_path, capsys):
    make_env()

    def closed(prompt):
        raise EOFError

    code, cfn = run(tmp_path, ask=closed)
    assert code == 2 and cfn.deleted == []
    assert "Not confirmed ('' is not 'tt'); nothing deleted." in capsys.readouterr().err


def test_an_aws_error_reading_leftovers_is_a_clean_warning(tmp_path, capsys):
    make_env()

    class Denied(Recording):
        def get_template(self, **kw):
            if kw["StackName"] == "tt-data" and self.deleted:
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}},
                                  "GetTemplate")
            return self._client.get_template(**kw)

    code, _ = run(tmp_path, "--yes", cfn=Denied(boto3.client("cloudformation",
                                                             region_name=REGION)))
    err = capsys.readouterr().err
    assert code == 1
    assert "warning: could not list what is left: GetTemplate failed: AccessDenied: no." in err


@pytest.mark.parametrize("arn, pid", [
    ("arn:aws:sns:us-east-1:123456789012:tt-alerts", "arn:aws:sns:us-east-1:123456789012:tt-alerts"),
    ("arn:aws:logs:us-east-1:123456789012:log-group:tt-build:*", "tt-build"),
    ("arn:aws:codebuild:us-east-1:123456789012:project/tt-image", "tt-image"),
    ("arn:aws:s3:::tt-data-bucket", "tt-data-bucket")])
def test_a_kept_stacks_resource_is_recognised_by_its_physical_id(arn, pid):
    assert belongs_to(arn, [], [pid])
    assert not belongs_to(arn, [], [pid + "-other"])


def test_the_fix_for_a_config_naming_no_environment_is_a_command_that_runs(tmp_path, capsys):
    make_env()
    code, cfn = run(tmp_path, "--yes", config_text="legacy_option: true\n")
    err = capsys.readouterr().err
    assert code == 2 and cfn.deleted == []
    fix = err.split("Fix: rlkit teardown ", 1)[1].split("\n", 1)[0].split()
    values = {"ENV": "tt", "REGION": REGION, "ACCOUNT_ID": "123456789012"}
    code, cfn = run(tmp_path, "--yes", *[values.get(word, word) for word in fix])
    assert code == 0 and "tt-cluster" in cfn.deleted
