"""Training budgets: how long a run trains, in epochs, training FLOPs or seconds; no MLflow here.

Growth papers state their gains at equal compute, so a run can be given its cost rather than its
epochs. A ``--budget`` goes through this package in order:

1. ``spec``: the text read (``24ep``, ``3.2e14flops``, ``600s``, ``run:RUN_ID[:s][*factor]``: the
   cost of a finished run, read by the caller's ``run_cost``) into a ``Budget``.
2. ``plan``: the run length E it buys, the largest whose planned cost fits it; everything that is
   a function of the run's length then follows E (the cosine learning rate, named growth
   schedules, schedules and tier boundaries written for ``--epochs`` and scaled to E, the
   curriculum's stages, pruning's annealing tail). FLOPs plan exactly, up to loss-aware pruning,
   whose share is known only as the run goes (``PRUNED_SHARE_PLANNED`` of its rate). Seconds
   cannot be planned as well: each network is timed through the training loop for a few
   batches first (the caller's timer), a machine's speed drifts, and whole epochs would leave up
   to one unspent. So a seconds run plans one epoch more than fits (``SECONDS_MARGIN_EPOCHS``).
3. ``meter``: while the run trains, the stop rule before every step. A FLOPs or seconds run stops
   before a step that would overrun its budget, so it never spends more than it was given. A
   seconds run predicts each step from its own measured rate and keeps back what its last epoch
   trained outside its steps (only a growth event's seconds, at the start of an epoch, are not
   predicted); its learning rate follows whichever is further on, its steps or its clock (the
   share of its seconds spent), so it anneals where the seconds end.
4. ``timing``: which seconds count. Seconds are always seconds that train: the training step,
   growth and the data diet's bookkeeping, not validation, logging or checkpoints.
5. ``replan``: after every epoch a seconds run plans again from its own measured epochs
   (``plan.SecondsPlanner``): a timing that planned too few epochs would otherwise end the run,
   its rate annealed, with seconds left.

**How a seconds budget stops**: before every step the loop asks ``meter.step_allowed``
(``BudgetMeter.allows``), which refuses the step that would overrun (the epoch ends there, and
the run with ``stop_reason`` ``budget``); after every epoch it calls ``replan.settle_seconds``,
which settles what the epoch spent, moves the plan's end to where the seconds will run out
(``replan_after``) and says whether a next epoch could pay its first step. The training loop
is ``pipeline/training/epoch_loop.py``; ``pipeline/run/length.py`` builds the budget's pieces
for a run (its MLflow reads and its timing through the training loop).
"""
