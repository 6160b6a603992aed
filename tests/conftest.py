"""Shared fixtures: every example config is synthesized once per test session (with cdk-nag), a
config variant once per distinct config; the pinned external artifacts (``external`` tests)."""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before aws_cdk is imported: no Node EOL banner, and no built-in CloudFormation validation
# plugin during synth (cfn-lint runs on the templates in test_cfn_lint.py instead).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ["CDK_VALIDATION"] = "false"
# No test reads the developer's kubeconfig: `gate`/`launch --dry-run` read the kubectl context
# (locally), so without this their result would depend on the machine. A test that wants a
# context uses the kubectl stub (tests/support/fakes.py) or sets KUBECONFIG itself.
os.environ["KUBECONFIG"] = "/nonexistent/rlkit-tests/kubeconfig"
# moto's EC2 backend loads its catalogue of public AMIs each time a region's backend is made or
# reset (MOTO_EC2_LOAD_DEFAULT_AMIS, moto 5.2.5 settings.py and ec2/models/amis.py): about 3 CPU-s
# of the preflight tests. The kit never looks up an EC2 image; a test that needs one registers it.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")

# The test processes hold a large heap (the jsii runtime's object proxies, torch, botocore's
# models). With CPython's default thresholds (700, 10, 10) a worker ran about 8,000 young and 35
# full collections, 15-20 s of its CPU; with these, and what collection built frozen out of later
# collections (below), about 5 s.
gc.set_threshold(50_000, 20, 20)

import pytest  # noqa: E402

from infra.config import KitConfig, load_config  # noqa: E402
from tests.support import artifacts  # noqa: E402
from tests.support.botocore_cache import share_botocore_loader, share_moto_s3_urls  # noqa: E402

from tests.support.cdk import REPO_ROOT  # noqa: E402

# Every worker imports this file at collection, so the moto tests of images/trainer/tests share
# the loader too when the whole suite runs.
share_botocore_loader()
share_moto_s3_urls()


@dataclass
class Synth:
    config: KitConfig
    outdir: Path
    templates: dict[str, dict]  # stack name -> template
    manifest: dict
    stacks: Any = None  # stacks.kit.KitStacks
    nag_error: str | None = None  # examples only: what cdk-nag's failed synth said, if it failed

    def template(self, kind: str, group: str | None = None) -> dict:
        from infra import names
        if kind == "gpu":
            return self.templates[names.gpu_stack_name(self.config.name, group)]
        return self.templates[names.stack_names(self.config.name)[kind]]

    @property
    def nag_report(self) -> dict:
        """cdk-nag's AwsSolutions report (examples only: they synthesize with it)."""
        report = json.loads((self.outdir / "validation-report.json").read_text())
        (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
        return nag


def _synthesize(config: KitConfig, outdir: str, *, nag: bool) -> Synth:
    """One CDK synth of ``config`` into ``outdir``; with cdk-nag's AwsSolutions validation plugin
    when ``nag`` (it only adds validation-report.json: the templates are the same)."""
    from stacks.kit import build_stacks, make_app

    app = make_app(outdir=outdir)
    # No copy of each asset (the kubectl and awscli layers: 57 MB) in every assembly: the
    # templates are the same (asset hashes do not depend on staging); only *.assets.json then
    # point at the source files. The real `python app.py` tests stage as the CLI does.
    app.node.set_context("aws:cdk:disable-asset-staging", True)
    stacks = build_stacks(app, config)
    nag_error = None
    if nag:
        from aws_cdk import Validations
        from cdk_nag import AwsSolutionsChecks
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    try:
        app.synth()
    except Exception as err:  # the plugin fails synth on open findings, after writing the assembly
        if not (nag and (Path(outdir) / "validation-report.json").is_file()):
            raise
        nag_error = str(err)
    templates = {s.stack_name: json.loads((Path(outdir) / s.template_file).read_text())
                 for s in stacks.all()}
    manifest = json.loads((Path(outdir) / "manifest.json").read_text())
    return Synth(config=config, outdir=Path(outdir), templates=templates, manifest=manifest,
                 stacks=stacks, nag_error=nag_error)


def _lock_file(outdir: Path) -> Path:
    """The file whose lock a worker holds while it makes the synth in ``outdir``."""
    return outdir.parent / f"{outdir.name}.lock"


@functools.cache
def _synth(example: str, outdir: str) -> Synth:
    """The example's synth: made here, or read back from ``outdir`` when another pytest-xdist
    worker of this run already made it (one synth per example per run, not per worker)."""
    import fcntl

    out = Path(outdir)
    record = out.parent / f"{example}.synth.json"  # written last: the assembly in outdir is whole
    with open(_lock_file(out), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not record.is_file():
            config = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
            made = _synthesize(config, outdir, nag=True)
            files = {s.stack_name: s.template_file for s in made.stacks.all()}
            record.write_text(json.dumps({"templates": files, "nag_error": made.nag_error}))
            return made
    saved = json.loads(record.read_text())
    return Synth(config=load_config(REPO_ROOT / "examples" / f"{example}.yaml"), outdir=out,
                 templates={name: json.loads((out / file).read_text())
                            for name, file in saved["templates"].items()},
                 manifest=json.loads((out / "manifest.json").read_text()), nag_error=saved["nag_error"])


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    """synth(example_name) -> Synth, cached for the session (cdk-nag runs inside it); under
    pytest-xdist the workers of one run share each example's synth."""
    root = tmp_path_factory.getbasetemp()  # under xdist: <this run's folder>/popen-gwN
    base = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "cdk-examples"
    base.mkdir(exist_ok=True)

    def get(example: str) -> Synth:
        return _synth(example, str(base / example))

    def get_all(examples) -> dict[str, Synth]:
        """Every example's synth, first those no other worker is making: two workers that both
        need them all then split the synths instead of one waiting on the other's locks."""
        import fcntl

        for example in examples:
            with open(_lock_file(base / example), "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # another worker is making it now: take it last
                    continue
            get(example)
        return {example: get(example) for example in examples}

    get.all = get_all
    return get


@pytest.fixture(scope="session")
def synth_config(tmp_path_factory):
    """synth_config(config) -> Synth of a config variant, cached for the session by the config's
    content, so tests that build the same variant share one synth. Treat the result as read-only."""
    base = tmp_path_factory.mktemp("cdk-variants")
    cache: dict[str, Synth] = {}

    def get(config: KitConfig) -> Synth:
        key = hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]
        if key not in cache:
            cache[key] = _synthesize(config, str(base / key), nag=False)
        return cache[key]

    return get


@pytest.fixture(autouse=True)
def _fake_ecr_digests(monkeypatch):
    """No test reads ECR: `rlkit gate`/`launch` read the image's digest from a fake ECR where
    every tag names tests.support.fakes.digest_of(tag) (a test calls fakes.fake_ecr for other answers)."""
    from tests.support.fakes import fake_ecr
    fake_ecr(monkeypatch)


@pytest.fixture(scope="session", autouse=True)
def _helm_renders_once_per_input():
    """``helm template`` runs once per distinct input in a test process: the scheduling and chart
    contracts render the same release of the same chart with the same values for many tests
    (two of three renders were repeats). Each distinct input still goes through the real Helm;
    the key holds everything the render reads (release, values, archive file, Helm binary,
    Kubernetes version), and each caller gets its own copy of the objects."""
    import copy

    from ops import helm as helm_module

    real = helm_module.render_release
    done: dict[str, list[dict]] = {}

    def render_release(release, *, archive, helm, kubernetes_version):
        chart, binary = Path(archive).stat(), Path(helm).stat()  # a linked copy: the same inode
        key = json.dumps([dataclasses.asdict(release), str(archive), chart.st_size,
                          chart.st_mtime_ns, binary.st_dev, binary.st_ino, kubernetes_version],
                         sort_keys=True)
        if key not in done:
            done[key] = real(release, archive=archive, helm=helm,
                             kubernetes_version=kubernetes_version)
        return copy.deepcopy(done[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helm_module, "render_release", render_release)
        yield


# --- pinned external artifacts (tests/support/artifacts.py): tests using these are `external` ---

EXTERNAL_FIXTURES = {"chart_dir", "crd_dir", "rayjob_crd", "upstream"}


@pytest.fixture(scope="module")
def upstream() -> Path:
    """The pinned upstream sources (../shared/upstream or the cache) side by side: required in
    CI, an explained skip elsewhere (tests/support/miles_parser.py)."""
    from tests.support.miles_parser import UPSTREAM, require_sources

    require_sources()
    return UPSTREAM


@pytest.fixture
def real_kubectl(tmp_path_factory, monkeypatch) -> Path:
    """A real kubectl first on PATH: the one the kit's kubectl layer package carries (installed
    with the kit, so these tests run wherever the suite does)."""
    from infra.versions import DEFAULT_KUBERNETES_VERSION
    from ops.helm import layer_binary

    binary = layer_binary(DEFAULT_KUBERNETES_VERSION,
                          tmp_path_factory.getbasetemp() / "layer-binaries", "kubectl")
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return binary


@pytest.fixture(scope="session")
def chart_dir() -> Path:
    """The folder of locked chart archives (../shared/charts or the artifact cache)."""
    return artifacts.require_chart_dir()


# The costliest modules (CPU seconds on 2 cores, 2026-12-01), run first: pytest-xdist's
# --dist loadfile hands out modules in collection order, so a costly module collected last runs
# alone at the end while the other worker idles. Stale or missing names are harmless.
HEAVY_FIRST = (
    "tests/stacks/test_app_cli.py",  # 30 (2026-12-02: a CDK CLI context refusal as a process)
    "images/trainer/tests/test_trainer_checkpoint_safety.py",  # 26
    "tests/stacks/test_cfn_lint.py",  # 24, with synths of the examples
    "tests/infra/test_fuzz_config.py",  # 18
    "images/trainer/tests/test_trainer_resume.py",  # 17
    "tests/ops/test_readme_operate.py",  # 16
    "tests/stacks/test_checkov.py",  # 15
    "images/trainer/tests/test_trainer_bench_allreduce.py",  # 13
    "tests/stacks/test_observability_chart.py",  # 11
    "tests/manifests/test_manifests_render.py",  # 11
    "tests/ops/test_ops_check.py",  # 10
    "tests/manifests/test_miles_contract.py",  # 8
    "tests/planner/test_planner_cli.py",  # 8
)


# Modules that pay the same costly start-up in every worker process that runs one of them go to
# one worker together (with --dist loadfile): torch with torch.distributed.checkpoint (5.5 CPU-s
# to import) and a forkserver that preloads torch (4) for the trainer's tests; the Miles parser
# server (4: the pinned sources imported and a first parser built) for the Miles contracts.
SAME_WORKER = {
    "trainer": ("images/trainer/tests/",),
    "miles-parser": ("tests/manifests/test_miles_contract.py",
                     "tests/manifests/test_miles_mode_contract.py"),
}


def work_unit(module: str) -> str:
    """The unit pytest-xdist hands to one worker: the module, or its SAME_WORKER group."""
    return next((group for group, prefixes in SAME_WORKER.items()
                 if module.startswith(prefixes)), module)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown when xdist is not loaded
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the SAME_WORKER groups each one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedStartupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(super()._split_scope(nodeid))

    return SharedStartupScheduling(config, log)


def pytest_collection_finish(session):
    """Modules, test functions and fixtures live until the end: keep them out of every later
    collection (the thresholds at the top of this file say why)."""
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """Before pytest's own last full collection (its unraisable-exception plugin runs two at
    exit, about a second each over these heaps): freeze what the tests left, so the process
    ends without walking it. An exception raised while a test runs is still reported; one in the
    finalizer of a reference cycle that only a last collection would free is not."""
    gc.freeze()


def pytest_configure(config):
    """Keep the collection order below for pytest-xdist (it sorts modules by test count unless
    told not to, which put the costliest one-test modules last)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marker must be there when it does
def pytest_collection_modifyitems(config, items):
    """Mark every test that uses an artifact fixture ``external``, and remember which tests are,
    so an artifact read from an unmarked test fails (tests/support/artifacts.py). Then put the
    costliest modules first (HEAVY_FIRST), each module's tests kept together and in order."""
    for item in items:
        if EXTERNAL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.external)
    artifacts.EXTERNAL_TESTS.update(i.nodeid for i in items if i.get_closest_marker("external"))
    artifacts.collected = True
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable
