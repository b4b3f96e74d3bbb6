"""Hand-written schedules and MetaSchedule rules: the default CPU schedule, its recipes and kernel-family schedules."""
