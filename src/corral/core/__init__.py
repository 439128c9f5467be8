"""The vocabulary every layer shares: cluster, jobs, snapshots, decisions, the policy registry,
and the job ledger both the simulator and the live service keep their jobs' books with."""

from corral.core.cluster import Cluster, Node, Placement
from corral.core.errors import (
                                CorralError,
                                DecisionError,
                                InfeasibleJobError,
                                InputError,
                                UnknownPolicyError,
)
from corral.core.jobs import (
                                Assignment,
                                BatchConfig,
                                Decision,
                                JobSpec,
                                JobStatus,
                                JobView,
                                LrRule,
                                OracleInfo,
                                Snapshot,
)
from corral.core.ledger import Ask, JobLedger, should_decide
from corral.core.policy import (
                                Changes,
                                Keeps,
                                NoParams,
                                Policy,
                                Promises,
                                Reads,
                                create_policy,
                                param_fields,
                                policy_class,
                                policy_names,
                                register_policy,
)

__all__ = [
    "Ask", "Assignment", "BatchConfig", "Changes", "Cluster", "CorralError", "Decision", "DecisionError",
    "InfeasibleJobError", "InputError", "JobLedger", "JobSpec", "JobStatus", "JobView", "Keeps",
    "LrRule", "NoParams", "Node", "OracleInfo", "Placement", "Policy", "Promises", "Reads",
    "Snapshot", "UnknownPolicyError",
    "create_policy", "param_fields", "policy_class", "policy_names", "register_policy",
    "should_decide",
]
