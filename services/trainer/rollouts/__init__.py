"""Rollouts: one pass of the policy over a task group, on its own repo, with the reward it earns.
`base` (the sample, the in-process policy as a `ChatLLM`, N rollouts of a group), `curator` and
`curator_rewards` (the curator policy, Eq. 1), `agent` and `agent_rewards` (`policy: agent`)."""
