"""The GRPO engine: the policy model (`policy`), the objective (`loss`), one optimizer step over a batch
of samples (`sample`, `update`), DeepSpeed around the model (`engine`, `zero3`), checkpoints (`checkpoint`)
and the push of new weights to the serving backend (`sync`)."""
