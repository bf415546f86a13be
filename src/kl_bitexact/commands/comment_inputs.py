"""What `report` and `publish` both read and show, as a frozen value built from their shared
options (`arguments.add_input_arguments`, `add_policy_arguments`). Apart from `arguments`
so that building those options (`report --help`) imports no dataclass machinery."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.commands import arguments

# `typing` only for mypy.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from kl_bitexact.action import proof_jobs
    from kl_bitexact.compare.gate import Policy


@dataclass(frozen=True)
class CommentInputs:
    """What `report` and `publish` both read and show (`add_input_arguments`,
    `add_policy_arguments`): the results, findings and proofs, the marker's key, the gate's
    policy and the repository of short #N blockers."""

    results: tuple[Path, ...]
    expected_shards: tuple[str, ...]
    findings: Path | None
    proof: tuple[Path, ...]
    expected_proofs: tuple[proof_jobs.ProofJob, ...]
    annotations: bool
    key: str
    policy: Policy
    repo: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CommentInputs:
        return cls(
            results=tuple(args.results),
            expected_shards=tuple(args.expected_shards),
            findings=args.findings,
            proof=tuple(args.proof or ()),
            expected_proofs=tuple(args.expected_proofs),
            annotations=args.annotations,
            key=args.key,
            policy=arguments.policy(args),
            repo=args.repo,
        )
