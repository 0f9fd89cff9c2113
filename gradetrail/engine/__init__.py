"""Running an eval: the runner, the per-sample pipeline, the agent loop, interrupts."""
