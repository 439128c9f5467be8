"""The emulated executor: the simulator's jobs on an emulated clock, behind the executor
interface, so the real control plane can be run and compared with `corral simulate`."""
