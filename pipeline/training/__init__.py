"""Training, with no MLflow inside: ``config`` (options, optimizer), ``state`` (what an epoch
hands the next), ``epoch_loop`` (``fit`` and the ``TrainingPlan`` hooks), ``metrics`` (per-tier,
per-exit and label-noise measurements), ``checkpoints`` (save, and resume bit-exactly),
``health`` (the run's verdict), ``timing`` (where the seconds go), ``monitor`` (how much
validation an epoch reads), ``average`` (the weight average), ``budget`` (FLOPs and seconds
budgets and the meter that spends them).
"""
