"""Resource planner: size the cluster and pick the parallel layout before paying for GPUs.

Given an MoE model and an EC2 GPU instance type, the planner answers: how many nodes, which
tensor / pipeline / expert / data parallel sizes, whether the layout fits in GPU memory, how long
a training step takes, which expert-parallel backend to use and what it costs. It reads the
catalogs (``infra.catalog``: instances, GPUs, models); it imports no CDK and reads no environment. See
docs/planner.md for the model, its sources, its calibration and its limits.

    from infra.planner import PlanRequest, plan
    result = plan(PlanRequest("qwen3-30b-a3b", "p5.48xlarge", nodes=4))
    best = result.best
    print(best.layout.label(), best.time.tokens_per_s_per_gpu, best.cost.dollars_per_million_tokens)

    from infra.planner import RLPlanRequest, RLSetup, plan_rl  # rollout + weight sync + training
    rl = plan_rl(RLPlanRequest("qwen3-30b-a3b", "p5en.48xlarge",
                               RLSetup(prompts=32, samples_per_prompt=8)))
    print(rl.best.placement, rl.best.engine.label(), rl.best.time.step, rl.best.dollars_per_step)
"""

from infra.catalog.gpus import GPU_SPECS
from infra.trainer_contract import EP_BACKENDS
from infra.planner.backend import BackendChoice, recommend_backend
from infra.planner.errors import PlannerError
from infra.planner.hardware import REFERENCE_SYSTEMS, System, get_system, plannable_systems
from infra.planner.layout import Layout, TrainingSetup
from infra.planner.memory import MemoryBreakdown, estimate_memory
from infra.planner.models import MODEL_CATALOG, MoEModel, get_model, load_model_file
from infra.planner.request import Pins, PlanRequest, RLPlanRequest, RLSetup
from infra.planner.rl import RLCandidate, RLPlan, plan_rl
from infra.planner.search import Candidate, Cost, PlanResult, Rejection, evaluate, plan
from infra.planner.timing import StepTime, step_time

__all__ = [
    "BackendChoice", "Candidate", "Cost", "EP_BACKENDS", "GPU_SPECS", "Layout", "MODEL_CATALOG",
    "MemoryBreakdown", "MoEModel", "Pins", "PlanRequest", "PlanResult", "PlannerError",
    "REFERENCE_SYSTEMS", "RLCandidate", "RLPlan", "RLPlanRequest", "RLSetup", "Rejection",
    "StepTime", "System", "TrainingSetup", "estimate_memory", "evaluate", "get_model",
    "get_system", "load_model_file", "plan", "plan_rl", "plannable_systems", "recommend_backend",
    "step_time",
]
