"""The vocabulary every layer shares: cluster, jobs, snapshots, decisions, the policy registry,
the job ledger both the simulator and the live service keep their jobs' books with, and the
scheduling round both run (`Rounds`)."""

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
from corral.core.ledger import JobLedger
from corral.core.policy import (
                                Changes,
                                Keeps,
                                NoParams,
                                Policy,
                                PolicyRegistry,
                                Promises,
                                Reads,
                                param_fields,
                                register_policy,
)
from corral.core.rounds import Ask, Rounds, World

__all__ = [
    "Ask", "Assignment", "BatchConfig", "Changes", "Cluster", "CorralError", "Decision",
    "DecisionError", "InfeasibleJobError", "InputError", "JobLedger", "JobSpec", "JobStatus",
    "JobView", "Keeps", "LrRule", "NoParams", "Node", "OracleInfo", "Placement", "Policy",
    "Promises", "Reads", "Rounds", "Snapshot", "UnknownPolicyError", "World",
    "PolicyRegistry", "param_fields", "register_policy",
]
