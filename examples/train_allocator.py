"""Train PPO on ToolBench with the cost callback, then compare it with LoRA-guided PPO.

Usage: python examples/train_allocator.py [--timesteps N] [--logdir DIR] [--quiet]

Progress bars (SB3's for PPO, the supervised stage's) go to stderr on a terminal;
``--quiet`` hides them.

The callback's keys (cost/cps, cost/flops_per_success, ...) land in DIR/progress.csv
beside SB3's own; point TensorBoard at DIR after adding "tensorboard" to the formats.
"""

import argparse
import sys
import tempfile

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure

import cost_envs  # noqa: F401  (registers the environments)
from agents.baselines import CostOptOracle
from agents.callbacks import CostMetricsCallback
from agents.evaluation import compare, format_table
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.training import train
from agents.progress import learn_progress
from agents.seeds import TRAIN_TASK_SEED

parser = argparse.ArgumentParser(allow_abbrev=False)  # a misspelt option is an error
parser.add_argument("--timesteps", type=int, default=20_000)
parser.add_argument("--logdir", default=None)
parser.add_argument("--quiet", action="store_true", help="no progress bars")
args = parser.parse_args()
show = not args.quiet and sys.stderr.isatty()  # bars only where someone watches
torch.set_num_threads(1)
logdir = args.logdir or tempfile.mkdtemp(prefix="cost-envs-")

# Plain SB3: PPO with the allocator network (no LoRA) and the cost callback.
env = gym.make("cost_envs/ToolBench-v0")
ppo = PPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, n_steps=512, seed=0)
ppo.set_logger(configure(logdir, ["csv"]))
ppo.get_env().seed(TRAIN_TASK_SEED)  # train on other tasks than the evaluation's (seed 0)
callback = CostMetricsCallback()
bar = learn_progress("ppo", show)  # on stderr: SB3's progress_bar=True draws on stdout
ppo.learn(args.timesteps, callback=[callback, bar] if bar else callback)
print(f"last rollout: success {callback.history[-1]['rollout/success_rate']:.2f}, "
      f"CPS {callback.history[-1]['cost/cps']:.4f} (logged to {logdir}/progress.csv)")

# The paper's hybrid: supervised LoRA warm start, then PPO on the adapter only.
hybrid = train("cost_envs/ToolBench-v0", "lora-ppo", args.timesteps, seed=0, progress_bar=show)
results = compare({"ppo": ppo, "lora-ppo": hybrid, "oracle": CostOptOracle},
                  "cost_envs/ToolBench-v0", episodes=200, seed=0)
print(format_table(results))
