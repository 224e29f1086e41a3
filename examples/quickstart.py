"""Quickstart: make an env, call some agents, read cost and FLOPs from info."""

import gymnasium as gym

import cost_envs  # noqa: F401  (registers cost_envs/* ids)

env = gym.make("cost_envs/ToolBench-v0")
obs, info = env.reset(seed=0)
done = False
while not done:
    action = env.action_space.sample()  # bit i = call tool i this turn
    obs, reward, terminated, truncated, info = env.step(action)
    print(f"cost {info['cost']:.4f}  flops {info['flops']:.2e}  calls {info['calls']}")
    done = terminated or truncated
print(f"success {info['success']}  quality {info['quality']:.1f}  "
      f"episode cost {info['episode_cost']:.4f}")
