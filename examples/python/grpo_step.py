"""A GRPO training loop in torch where normkit computes the advantages, the token credit and the
loss with its gradient (docs/python.md).

The task: a prompt is a digit d (0..9); the policy writes T tokens from a vocabulary of 10, and a
response earns the fraction of its tokens equal to (d + 1) mod 10. The policy is an embedding of
the prompt and the position, a normkit RMSNorm and a linear head. Each step samples G responses
per prompt, then
  1. advantages   normkit.advantage.group_normalize over each prompt's G responses (GRPO:
                  (r − mean)/(std + ε), torch.std's ddof = 1), the preset normkit.advantage.presets.verl_grpo;
  2. token credit normkit.credit.broadcast_advantages: A_i on every token of response i;
  3. log-probs    normkit.torch.logits_statistics: log π(y_t) from the logits in one read, with
                  normkit's logits backward;
  4. loss         normkit.torch.policy_loss: PPO's clipped surrogate, token-mean, whose backward is
                  normkit's gradient; then the optimizer steps.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/grpo_step.py [steps]

Prints the mean reward every 10 steps and exits non-zero unless the last reward beats the first
by a clear margin (tests/python/torch/test_examples.py runs it).
"""
import sys

import numpy as np
import torch

import normkit.torch as nt
from normkit import advantage, credit

PROMPTS, SAMPLES, TOKENS, VOCAB, WIDTH = 8, 8, 6, 10, 32


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.prompt = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Embedding(TOKENS, WIDTH)
        self.norm = nt.RMSNorm(WIDTH, eps=1e-6)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, prompts):
        """Logits [len(prompts), TOKENS, VOCAB]."""
        h = self.prompt(prompts)[:, None, :] + self.position.weight[None, :, :]
        return self.head(self.norm(h))


def step(policy, optimizer, generator):
    prompts = torch.randint(0, VOCAB, (PROMPTS,), generator=generator).repeat_interleave(SAMPLES)
    with torch.no_grad():
        old_logits = policy(prompts)
        tokens = torch.distributions.Categorical(logits=old_logits).sample()
        old_log_probs, _ = nt.logits_statistics(old_logits, tokens)
    rewards = (tokens == ((prompts + 1) % VOCAB)[:, None]).double().mean(dim=1)
    mask = np.ones((PROMPTS * SAMPLES, TOKENS), np.float32)

    # 1. one advantage per response, normalized within its prompt's group of SAMPLES
    scores = advantage.group_normalize(rewards.numpy(), SAMPLES, options=advantage.presets.verl_grpo())
    # 2. the same advantage on each of its tokens
    token_advantages = torch.from_numpy(credit.broadcast_advantages(scores.astype(np.float32), mask))

    # 3. and 4. the policy's log-probs and the clipped surrogate, both differentiable through normkit
    log_probs, _ = nt.logits_statistics(policy(prompts), tokens)
    loss, result = nt.policy_loss(log_probs, old_log_probs, token_advantages, torch.from_numpy(mask))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return rewards.mean().item(), result


def main(steps):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05)
    rewards = []
    for i in range(steps):
        reward, result = step(policy, optimizer, generator)
        rewards.append(reward)
        if i % 10 == 0 or i == steps - 1:
            print(f"step {i:3d}: mean reward {reward:.3f}, clip fraction {result.metrics.clip_fraction:.3f}")
    first, last = np.mean(rewards[:5]), np.mean(rewards[-5:])
    print(f"mean reward {first:.3f} over the first 5 steps, {last:.3f} over the last 5")
    return 0 if last > first + 0.3 else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 60))
