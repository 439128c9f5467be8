"""corral.sim: the trace-driven simulator - the engine's clock and rounds, simulated jobs on
their ground truth (`truth`), workloads, resize mechanisms, metrics and sweeps of many runs.

Imports core, perf and policies only, never torch, the service or the executors."""
