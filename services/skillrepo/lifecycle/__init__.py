"""A skill's life where a repo's policy has `candidates` on: a skill an op batch writes (from traffic) starts
as a candidate, served only to an exploration share of callers; a reviewer or the policy's measured-utility
rule promotes it (active) or retires it (not served, restorable). Op batches change only skills written from
traffic: a person's skills, and those written before the policy, are theirs. Repos without the policy (the
paper's `skillos run` streams) keep plain insert, update and delete.
"""
