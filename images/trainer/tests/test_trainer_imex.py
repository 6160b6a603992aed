"""rltrainer.imex: the IMEX channel and GPU fabric checks nodecheck runs on UltraServer pods."""

from __future__ import annotations

import io
import json

from rltrainer import imex, nodecheck

FABRIC = """
GPU 00000009:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 7
        ClusterUUID                       : 1f2e3d4c-0000-1111-2222-333344445555
    Processes                             : None
"""


def test_channel_present_and_absent(tmp_path):
    assert imex.check_imex_channel(str(tmp_path))[1:4] == (
        False, "an IMEX channel in /dev/nvidia-caps-imex-channels", "none")
    (tmp_path / "dev" / "nvidia-caps-imex-channels").mkdir(parents=True)
    (tmp_path / "dev" / "nvidia-caps-imex-channels" / "channel0").touch()
    name, ok, _, found, _ = imex.check_imex_channel(str(tmp_path))
    assert (name, ok, found) == ("imex_channel", True, ["channel0"])


def test_fabric_needs_every_gpu_completed_in_one_clique():
    four = FABRIC * 4
    assert imex.check_gpu_fabric(4, smi=lambda: four)[1] is True
    other = four.replace("CliqueId                          : 7",
                         "CliqueId                          : 8", 1)
    name, ok, _, found, fix = imex.check_gpu_fabric(4, smi=lambda: other)
    assert not ok and "cliques" in found and fix == imex.FABRIC_FIX
    pending = four.replace("Completed", "In Progress", 1)
    assert imex.check_gpu_fabric(4, smi=lambda: pending)[3].startswith("3 of 4")
    assert imex.check_gpu_fabric(4, smi=lambda: None)[3] == "nvidia-smi -q did not run"


def test_nodecheck_runs_them_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(imex, "_nvidia_smi_q", lambda: None)
    monkeypatch.setattr(imex.check_gpu_fabric, "__defaults__", (imex._nvidia_smi_q,))

    class Probe:  # every base check passes; only the new ones are under test
        def p(self, path: str):  # no image-versions file under the fake root
            return tmp_path / path.lstrip("/")

    results = []
    monkeypatch.setattr(nodecheck, "run_checks", lambda probe, **kw: list(results))
    args = nodecheck.build_parser().parse_args(
        ["--expect-gpus", "4", "--expect-efa", "4", "--root", str(tmp_path),
         "--expect-imex-channel"])
    out, err = io.StringIO(), io.StringIO()
    assert nodecheck.run_main(args, out, err, probe=Probe()) == 1
    names = [c["name"] for c in json.loads(out.getvalue())["checks"]]
    assert names == ["imex_channel", "gpu_fabric"]
    args = nodecheck.build_parser().parse_args(
        ["--expect-gpus", "4", "--expect-efa", "4", "--root", str(tmp_path)])
    out = io.StringIO()
    assert nodecheck.run_main(args, out, io.StringIO(), probe=Probe()) == 0
    assert json.loads(out.getvalue())["checks"] == []
