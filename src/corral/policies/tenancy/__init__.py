"""Teams sharing the cluster: `QueuedPolicy` runs one inner policy per queue on its share
(`corral.core.queues` reads the queues and computes the shares)."""

from corral.policies.tenancy.demand import is_elastic, job_demand, type_demand
from corral.policies.tenancy.layer import QueuedPolicy

__all__ = ["QueuedPolicy", "is_elastic", "job_demand", "type_demand"]
