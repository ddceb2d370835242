"""Measured utility per skill: outcomes of tasks a skill was served in, against tasks it matched and was
withheld in (at random, by the gateway or a stream), with the difference's 95 % interval (`skillos.utility`).

Each report names its trajectory; a trajectory counts once per skill, so a retried report adds nothing.
"""
