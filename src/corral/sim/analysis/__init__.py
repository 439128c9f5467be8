"""What is computed from runs and workloads: metrics, the LP lower bound, sim-to-real replay,
allocation records and the cloud auto-scaling study."""
