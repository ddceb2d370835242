"""The trainer's settings: its rollouts call every service over HTTP (env servers for the task
streams, the executor, the curator and the skill repo); its hyperparameters are `TrainConfig`."""

from __future__ import annotations

from skillos.settings import ServiceAddresses


class TrainerSettings(ServiceAddresses):
    pass
