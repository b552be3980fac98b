"""Growth during training: ``config`` (the growth options: the start network, the schedule, how
new layers start, when to grow) and ``plan`` (``GrowthPlan``: the events applied at the start of
their epochs, each new layer initialised by ``models/growth.py`` and the optimizer rebuilt).
The learning rate's re-warm after a growth is the epoch loop's (``pipeline/training/epoch_loop``).
"""
