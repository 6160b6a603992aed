"""Miles' metric log lines -> CloudWatch EMF lines (rltrainer.metrics).

The log lines are built from Miles v0.1.0's own sources (../shared/upstream/miles-v0.1.0): its
logging format string (miles/utils/logging_utils.py) and the f-string messages of the three
call sites the launcher reads, each found in the source by these tests, so a Miles upgrade that
changes them fails here. A missing upstream tree fails in CI and skips elsewhere.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest

from rltrainer import metrics

from trainer_helpers import pinned_source

# Every test here reads Miles' own log formats from its pinned sources (../shared or the cache).
pytestmark = pytest.mark.external


def upstream(rel: str) -> str:
    return pinned_source("miles-v0.1.0", rel, "Miles v0.1.0")


def miles_formatter() -> logging.Formatter:
    """Miles' own log format and date format, read from configure_logger_raw."""
    src = upstream("miles/utils/logging_utils.py")
    fmt = re.search(r'format=f"(.*?)",\n', src)[1]
    datefmt = re.search(r'datefmt="(.*?)"', src)[1]
    return logging.Formatter(fmt.replace("{name}", "RolloutManager"), datefmt=datefmt)


def miles_message(rel: str, pattern: str, **fields) -> str:
    """The message of a Miles ``logger.info(f"...")`` call in ``rel`` matching ``pattern``,
    filled in with ``fields`` the way the f-string would (``str`` of each value)."""
    calls = re.findall(r'logger\.info\(f"([^"]*)"\)', upstream(rel))
    found = [c for c in calls if re.fullmatch(pattern, c)]
    assert found, f"no logger.info(f\"{pattern}\") in Miles' {rel}: {calls}"
    return found[0].format(**{k: str(v) for k, v in fields.items()})


def miles_line(message: str, *, ray_prefix: str = "") -> str:
    record = logging.LogRecord("miles", logging.INFO, "/x/metrics.py", 89, message, None, None)
    return ray_prefix + miles_formatter().format(record) + "\n"


# Dicts shaped like the ones Miles logs (keys from the code paths named in rltrainer.metrics).
ROLLOUT = {"rollout/raw_reward": 0.625, "rollout/rewards": 0.1, "rollout/log_probs": -0.42}
ROLLOUT_PERF = {"rollout/response_len/mean": 812.5, "rollout/truncated_ratio": 0.03,
                "perf/rollout_time": 95.2, "perf/tokens_per_gpu_per_sec": 1432.0}
TRAIN_PERF = {"perf/actor_train_time": 210.0, "perf/step_time": 305.7,
              "perf/actor_train_tok_per_s": 5.1e4, "perf/wait_time_ratio": 0.3}
STEP = {"train/loss": 0.0123, "train/pg_loss": 0.011, "train/grad_norm": 1.7, "train/step": 42,
        "train/lr-pg_0": 1e-06}


def real_lines() -> dict[str, str]:
    return {
        "rollout": miles_line(miles_message(
            "miles/backends/training_utils/log_utils.py", r"\{metric_name\} \{rollout_id\}: \{reduced_log_dict\}",
            metric_name="rollout", rollout_id=7, reduced_log_dict=ROLLOUT)),
        "rollout_perf": miles_line(miles_message(
            "miles/ray/rollout/metrics.py", r"perf \{rollout_id\}: \{log_dict\}",
            rollout_id=7, log_dict=ROLLOUT_PERF), ray_prefix="(RolloutManager pid=4711) "),
        "train_perf": miles_line(miles_message(
            "miles/utils/train_metric_utils.py", r"perf \{rollout_id\}: \{log_dict\}",
            rollout_id=7, log_dict=TRAIN_PERF), ray_prefix="(MegatronTrainRayActor pid=52, ip=10.0.1.5) "),
        "step": miles_line(miles_message(
            "miles/backends/training_utils/log_utils.py", r"\{role_tag\}step \{accumulated_step_id\}: \{log_dict_out\}",
            role_tag="", accumulated_step_id=42, log_dict_out=STEP)),
    }


def emf_of(line: str, run: str = "qwen3-grpo", now: float = 1_700_000_000.5,
           environment: str = "moe-rl") -> dict | None:
    [(_, emf)] = list(metrics.emf_lines([line], environment=environment, run=run, clock=lambda: now))
    return None if emf is None else json.loads(emf)


# Where Miles v0.1.0 makes each key the launcher maps: (file, text that must be in it).
# rollout/<k>: train-data keys, prefixed by gather_log_data("rollout", ...); rollout/<stat> and
# perf/<k> of the rollout: log_rollout_data's dict_add_prefix; perf/<k> of training:
# log_perf_data_raw; train/<k>: log_train_step's f"train/{role_tag}{key}" over the loss dict.
EVIDENCE = {
    "rollout/raw_reward": ("miles/ray/rollout/train_data_conversion.py", '"raw_reward": ValueSpec'),
    "rollout/rewards": ("miles/ray/rollout/train_data_conversion.py", '"rewards": ValueSpec'),
    "rollout/response_len/mean": ("miles/ray/rollout/metrics.py", '"response_len/"'),
    "rollout/truncated_ratio": ("miles/ray/rollout/metrics.py", 'log_dict["truncated_ratio"]'),
    "perf/rollout_time": ("miles/ray/rollout/metrics.py", 'log_dict["rollout_time"] = rollout_time'),
    "perf/tokens_per_gpu_per_sec": ("miles/ray/rollout/metrics.py", '{key}tokens_per_gpu_per_sec"'),
    "perf/step_time": ("miles/utils/train_metric_utils.py", 'log_dict["perf/step_time"]'),
    "perf/actor_train_time": ("miles/utils/train_metric_utils.py", '"perf/actor_train_time" in log_dict'),
    "perf/actor_train_tok_per_s": ("miles/utils/train_metric_utils.py", 'log_dict["perf/actor_train_tok_per_s"]'),
    "perf/actor_train_mfu": ("miles/utils/train_metric_utils.py", 'log_dict["perf/actor_train_mfu"]'),
    "train/loss": ("miles/backends/training_utils/loss_hub/losses.py", '"loss":'),
    "train/pg_loss": ("miles/backends/training_utils/loss_hub/losses.py", '"pg_loss": pg_loss'),
    "train/grad_norm": ("miles/backends/training_utils/log_utils.py", 'log_dict_out[f"train/{role_tag}grad_norm"]'),
}


def test_mapped_keys_are_keys_miles_logs():
    """Every Miles key the launcher maps is one the pinned sources produce, so a renamed key is
    caught here."""
    assert set(EVIDENCE) == set(metrics.METRICS)
    for key, (rel, text) in EVIDENCE.items():
        assert text in upstream(rel), f"{key}: {text!r} not in Miles' {rel}"
    assert 'f"train/{role_tag}{key}"' in upstream("miles/backends/training_utils/log_utils.py")
    assert 'dict_add_prefix(_compute_perf_metrics_from_samples(args, samples, rollout_time), "perf/")' \
        in upstream("miles/ray/rollout/metrics.py")


@pytest.mark.parametrize("name", ["rollout", "rollout_perf", "train_perf", "step"])
def test_real_miles_lines_become_emf(name):
    line = real_lines()[name]
    record = emf_of(line)
    assert record is not None, line
    directive = record["_aws"]["CloudWatchMetrics"][0]
    assert record["_aws"]["Timestamp"] == 1_700_000_000_500
    assert directive["Namespace"] == "RLKit/Training"
    assert directive["Dimensions"] == [["Environment", "Run"]]
    assert (record["Environment"], record["Run"]) == ("moe-rl", "qwen3-grpo")
    names = [m["Name"] for m in directive["Metrics"]]
    for name_ in names:  # every declared metric has a numeric value at the top level
        assert isinstance(record[name_], float)
    expected = {
        "rollout": {"reward": 0.625, "reward_shaped": 0.1},
        "rollout_perf": {"response_length": 812.5, "truncated_ratio": 0.03, "rollout_time": 95.2,
                         "rollout_tokens_per_gpu_per_s": 1432.0},
        "train_perf": {"train_time": 210.0, "step_time": 305.7, "train_tokens_per_s": 5.1e4},
        "step": {"loss": 0.0123, "pg_loss": 0.011, "grad_norm": 1.7},
    }[name]
    assert {n: record[n] for n in names} == expected
    assert record.get("rollout_id", record.get("train_step")) == (42 if name == "step" else 7)


def metric_identities(record: dict) -> set[tuple]:
    """What CloudWatch makes of one EMF record: per metric and dimension set, its identity
    (namespace, metric name, dimension name/value pairs), which is what a query names."""
    return {(d["Namespace"], m["Name"], tuple((k, record[k]) for k in dims))
            for d in record["_aws"]["CloudWatchMetrics"] for dims in d["Dimensions"]
            for m in d["Metrics"]}


def test_two_environments_with_the_same_run_name_are_different_metrics():
    """The namespace is the account's, and the default run name is the same in every environment:
    with the run name as the only dimension, two environments' rewards were one metric."""
    line = real_lines()["rollout"]
    staging, prod = (metric_identities(emf_of(line, environment=e)) for e in ("staging", "prod"))
    assert staging and prod and not staging & prod
    assert ("RLKit/Training", "reward", (("Environment", "prod"), ("Run", "qwen3-grpo"))) in prod
    # No directive carries a set without the environment (a metric of its own, mixing them).
    assert all(("Environment", "prod") in dims for _, _, dims in prod)


def test_the_environment_comes_from_the_kits_variable():
    assert metrics.environment_name({"RLTRAINER_ENVIRONMENT": "staging"}) == "staging"
    assert metrics.environment_name({}) == metrics.METRICS_NO_ENVIRONMENT == "unnamed"
    assert metrics.environment_name({"RLTRAINER_ENVIRONMENT": " "}) == "unnamed"


def test_ray_dedup_suffix_is_tolerated():
    line = real_lines()["step"].rstrip("\n") + " [repeated 3x across cluster]\n"
    assert emf_of(line)["loss"] == 0.0123
    colored = ("\x1b[36m(MegatronTrainRayActor pid=52)\x1b[0m " + real_lines()["step"].rstrip("\n")
               + "\x1b[2m [repeated 3x across cluster]\x1b[0m\n")
    assert emf_of(colored)["grad_norm"] == 1.7


def test_emf_equals_what_the_aws_reference_library_writes():
    """AWS's own EMF library (aws-embedded-metrics, pinned in requirements-dev.txt) validates
    the namespace, dimensions (at most 30 per set; ASCII values of 1-1024 characters), names,
    units and values, and serializes the same record."""
    import datetime as dt

    from aws_embedded_metrics.logger.metrics_context import MetricsContext
    from aws_embedded_metrics.serializers.log_serializer import LogSerializer
    from aws_embedded_metrics.validator import validate_namespace

    import time

    for line in real_lines().values():
        mine = emf_of(line, now=round(time.time(), 3))  # the library refuses old timestamps
        directive = mine["_aws"]["CloudWatchMetrics"][0]
        ctx = MetricsContext()
        validate_namespace(directive["Namespace"])
        ctx.namespace = directive["Namespace"]
        ctx.set_dimensions([{"Environment": mine["Environment"], "Run": mine["Run"]}],
                           use_default=False)
        for metric in directive["Metrics"]:
            ctx.put_metric(metric["Name"], mine[metric["Name"]], metric["Unit"])
        for key in ("miles_line", "rollout_id", "train_step"):
            if key in mine:
                ctx.set_property(key, mine[key])
        ctx.set_timestamp(dt.datetime.fromtimestamp(mine["_aws"]["Timestamp"] / 1000,
                                                    tz=dt.timezone.utc))
        [theirs] = LogSerializer.serialize(ctx)
        assert json.loads(theirs) == mine


def test_units():
    record = emf_of(real_lines()["train_perf"])
    units = {m["Name"]: m["Unit"] for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units == {"train_time": "Seconds", "step_time": "Seconds", "train_tokens_per_s": "Count/Second"}


def test_other_lines_pass_without_emf():
    for line in ["", "plain text\n", "[2026-11-30 10:00:00.000 x] arguments.py:10 - rollout sleep for 2 hours\n",
                 miles_line("eval 3: {'eval/gsm8k': 0.5}"),  # eval is not mapped
                 miles_line("critic-step 3: {'train/critic-loss': 0.5}"),  # a critic's step
                 miles_line("perf 3: {'perf/other': 1.0}"),  # no mapped key
                 miles_line("perf 3: {broken"),
                 miles_line("step 3: __import__('os')")]:
        assert emf_of(line) is None, line


def test_numpy_reprs_and_non_finite_values():
    record = emf_of(miles_line("step 5: {'train/loss': np.float64(0.25), 'train/grad_norm': nan, "
                               "'train/pg_loss': -inf}"))
    assert [m["Name"] for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["loss"]
    assert record["loss"] == 0.25 and "grad_norm" not in record


def test_relay_copies_every_line_and_adds_emf_after_metric_lines():
    lines = real_lines()
    source = io.BytesIO(b"starting\n" + lines["step"].encode() + b"\xff broken bytes\n")
    sink, emf_sink = io.StringIO(), io.StringIO()
    metrics.relay(source, sink, environment="e", run="r1", emf_sink=emf_sink)
    assert sink.getvalue().splitlines()[0] == "starting"
    assert sink.getvalue().splitlines()[1] == lines["step"].rstrip("\n")
    assert sink.getvalue().splitlines()[2] == "\ufffd broken bytes"
    [emf] = emf_sink.getvalue().splitlines()
    assert json.loads(emf)["loss"] == 0.0123


def test_a_failing_output_does_not_stop_the_relay_draining_the_pipe(capfd):
    """Before: the first failed write (a full disk under Ray's job log, a closed stream) ended the
    relay thread; the child's pipe then filled and train.py blocked on its next log line, with
    nothing failed and the GPUs idle. Now every line is still read, and the loss is said once."""
    class FullDisk(io.StringIO):
        def write(self, text):
            if len(self.getvalue()) > 100:
                raise OSError(28, "No space left on device")
            return super().write(text)

    source = io.BytesIO(b"".join(b"line %d\n" % i for i in range(5000)))
    metrics.relay(source, FullDisk(), environment="e", run="r")
    assert source.read() == b""  # drained to the end
    err = capfd.readouterr().err
    assert err.count("writing the trainer's output failed ([Errno 28] No space left on device)") == 1


def test_launcher_relays_a_child_process(tmp_path, capfd, monkeypatch):
    """run_training with metrics on: the child's stdout and stderr still arrive, and each metric
    line is followed by its EMF line on stdout, for the environment the kit's RayJob names."""
    from rltrainer.launch import run_training
    from rltrainer.miles import TrainCommand

    monkeypatch.setenv("RLTRAINER_ENVIRONMENT", "env-a")
    line = real_lines()["step"]
    child = ("import sys\nsys.stdout.write('hello\\n')\nsys.stderr.write(" + repr(line) + ")\n"
             "sys.exit(3)\n")
    code = run_training(TrainCommand(argv=[sys.executable, "-c", child], env={}, cwd=str(tmp_path)),
                        metrics_run="run-a")
    out, err = capfd.readouterr()
    assert code == 3
    assert line in err and "hello" in out
    emf = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [(e["Environment"], e["Run"]) for e in emf] == [("env-a", "run-a")]
    assert emf[0]["grad_norm"] == 1.7


# --- each datapoint once: a restarted submitter, a retried job -----------------------------------


def _lines(*messages: str) -> bytes:
    return "".join(miles_line(m) for m in messages).encode()


def test_a_retried_job_does_not_send_a_rollout_twice(tmp_path):
    """The ledger on the checkpoint directory outlives the job: after a retry resumes from an older
    save and runs rollouts 6 and 7 again, only rollout 8 is new. Both perf lines of one rollout (the
    rollout manager's and the actor's) pass."""
    ledger = tmp_path / metrics.LEDGER_FILE
    first = _lines("rollout 6: {'rollout/raw_reward': 0.5}", "rollout 7: {'rollout/raw_reward': 0.6}",
                   "perf 7: {'perf/rollout_time': 30.0}", "perf 7: {'perf/step_time': 90.0}",
                   "step 14: {'train/loss': 0.1}")
    emf1 = io.StringIO()
    metrics.relay(io.BytesIO(first), io.StringIO(), environment="e", run="r", emf_sink=emf1,
                  ledger=metrics.EmittedLedger(ledger))
    assert len(emf1.getvalue().splitlines()) == 5
    retry = _lines("rollout 6: {'rollout/raw_reward': 0.55}", "rollout 7: {'rollout/raw_reward': 0.65}",
                   "perf 7: {'perf/step_time': 91.0}", "rollout 8: {'rollout/raw_reward': 0.7}",
                   "step 14: {'train/loss': 0.2}", "step 16: {'train/loss': 0.09}")
    sink, emf2 = io.StringIO(), io.StringIO()
    metrics.relay(io.BytesIO(retry), sink, environment="e", run="r", emf_sink=emf2,
                  ledger=metrics.EmittedLedger(ledger))
    sent = [json.loads(x) for x in emf2.getvalue().splitlines()]
    values = [e for e in sent if metrics.REPLAY_METRIC not in e]
    assert [(e["miles_line"], e.get("rollout_id", e.get("train_step"))) for e in values] == [("rollout", 8), ("step", 16)]
    assert len(sink.getvalue().splitlines()) == 6  # every log line is still relayed
    assert json.loads(ledger.read_text()) == {"rollout:reward": 8, "perf:rollout_time": 7, "perf:step_time": 7,
                                              "step:loss": 16}


def test_a_replayed_rollout_says_it_ran_again_without_its_values(tmp_path):
    """Before: a retry that resumes from a save 20 rollouts back sent nothing for those 20 rollouts
    (200 min at the default estimate), and `rlkit status` called the healthy run stalled. Each
    replayed rollout line now sends `replayed_rollout` (its id), only that, every time it runs
    again (a second retry too); a replayed training step sends nothing. The record is one AWS's
    own EMF library writes alike."""
    import datetime as dt

    from aws_embedded_metrics.logger.metrics_context import MetricsContext
    from aws_embedded_metrics.serializers.log_serializer import LogSerializer

    ledger = tmp_path / metrics.LEDGER_FILE
    first = _lines("rollout 6: {'rollout/raw_reward': 0.5}", "perf 6: {'perf/step_time': 90.0}",
                   "step 12: {'train/loss': 0.1}")
    metrics.relay(io.BytesIO(first), io.StringIO(), environment="e", run="r", emf_sink=io.StringIO(),
                  ledger=metrics.EmittedLedger(ledger))
    for _retry in range(2):
        emf = io.StringIO()
        metrics.relay(io.BytesIO(first), io.StringIO(), environment="e", run="r", emf_sink=emf,
                      ledger=metrics.EmittedLedger(ledger))
        sent = [json.loads(x) for x in emf.getvalue().splitlines()]
        assert [(e["miles_line"], e["rollout_id"], e[metrics.REPLAY_METRIC]) for e in sent] == [
            ("rollout", 6, 6.0), ("perf", 6, 6.0)]
        assert all("reward" not in e and "step_time" not in e for e in sent)
    mine = sent[0]
    ctx = MetricsContext()
    ctx.namespace = mine["_aws"]["CloudWatchMetrics"][0]["Namespace"]
    ctx.set_dimensions([{"Environment": "e", "Run": "r"}], use_default=False)
    ctx.put_metric(metrics.REPLAY_METRIC, mine[metrics.REPLAY_METRIC], "None")
    ctx.set_property("miles_line", "rollout")
    ctx.set_property("rollout_id", 6)
    ctx.set_timestamp(dt.datetime.fromtimestamp(mine["_aws"]["Timestamp"] / 1000, tz=dt.timezone.utc))
    [theirs] = LogSerializer.serialize(ctx)
    assert json.loads(theirs) == mine


def test_a_broken_ledger_sends_rather_than_drops(tmp_path):
    ledger = tmp_path / metrics.LEDGER_FILE
    ledger.write_text("{not json")
    emf = io.StringIO()
    metrics.relay(io.BytesIO(_lines("rollout 1: {'rollout/raw_reward': 0.5}")), io.StringIO(), environment="e", run="r",
                  emf_sink=emf, ledger=metrics.EmittedLedger(ledger))
    assert len(emf.getvalue().splitlines()) == 1


def test_in_the_rayjob_emf_goes_to_the_containers_own_output_not_the_job_log(tmp_path):
    """KubeRay's submitter replays the job log from the start when its pod restarts, and Fluent
    Bit ships the submitter's output: EMF lines in the job log would be sent again. Inside the
    kit's RayJob they go to the container's stdout (PID 1's), which nothing replays."""
    container_out = tmp_path / "fd1"
    container_out.write_text("")
    sink = metrics.emf_sink({"RLTRAINER_RAYJOB": "qwen3-grpo"}, container_stdout=str(container_out))
    assert sink is not None
    job_log = io.StringIO()
    metrics.relay(io.BytesIO(_lines("rollout 3: {'rollout/raw_reward': 0.5}")), job_log, environment="e", run="r",
                  emf_sink=sink)
    sink.close()
    assert "_aws" not in job_log.getvalue()
    assert json.loads(container_out.read_text())["reward"] == 0.5
    assert metrics.emf_sink({}, container_stdout=str(container_out)) is None  # outside the RayJob: stdout
    assert metrics.emf_sink({"RLTRAINER_RAYJOB": "x"}, container_stdout=str(tmp_path / "no" / "fd1")) is None


def test_a_restarted_submitter_replaying_the_job_log_adds_no_datapoint(tmp_path):
    """End to end: the launcher's relay writes the job log and the container output; a submitter
    that replays the job log twice (a restart) carries no EMF line, so the collector sees each
    datapoint exactly once."""
    container_out = tmp_path / "fd1"
    container_out.write_text("")
    sink = metrics.emf_sink({"RLTRAINER_RAYJOB": "qwen3-grpo"}, container_stdout=str(container_out))
    job_log = io.StringIO()
    metrics.relay(io.BytesIO(_lines("rollout 1: {'rollout/raw_reward': 0.5}", "rollout 2: {'rollout/raw_reward': 0.6}")),
                  job_log, environment="e", run="r", emf_sink=sink,
                  ledger=metrics.EmittedLedger(tmp_path / metrics.LEDGER_FILE))
    sink.close()
    submitter_output = job_log.getvalue() * 2  # printed once, then again after the restart
    collected = [x for x in container_out.read_text().splitlines() + submitter_output.splitlines()
                 if x.startswith('{"_aws"')]
    assert sorted(json.loads(x)["rollout_id"] for x in collected) == [1, 2]
