"""Which K policy the scheduler runs with, from its --num-spec-tokens and the executor's drafter."""

from __future__ import annotations

import logging
from pathlib import Path

from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.dynamic_k import DynamicKPolicy, FixedK, KPolicy
from scheduler_svc.spec_profile import batch_grid, cached_or_measured
from scheduler_svc.tokenizer import Tokenizer
from stepahead_common.cache_dir import stepahead_cache_dir
from stepahead_proto import executor_pb2, executor_pb2_grpc

logger = logging.getLogger(__name__)


def profile_dir(config: SchedulerServiceConfig) -> Path:
    """The step-profile cache folder."""
    if config.spec_profile_dir is not None:
        return Path(config.spec_profile_dir).expanduser()
    return stepahead_cache_dir() / "profiles"


def fixed_k(config: SchedulerServiceConfig, max_k: int) -> int:
    """K of a fixed policy: N (checked against the executor's K_max), or K_max for auto."""
    wanted = config.fixed_num_spec_tokens
    if wanted is None:
        return max_k
    if wanted > max_k:
        raise ValueError(f"num_spec_tokens: {wanted} is more than the executor proposes "
                         f"(its K_max is {max_k}; start it with --num-spec-tokens >= {wanted})")
    return wanted


async def speculation_policy(
    config: SchedulerServiceConfig, stub: executor_pb2_grpc.ExecutorStub,
    description: executor_pb2.ExecutorDescription, tokenizer: Tokenizer,
) -> tuple[int, KPolicy]:
    """(K_max, policy): fixed K, or dynamic K from the cached (else measured) step profile."""
    max_k = description.max_num_spec_tokens if description.spec_method not in ("", "none") else 0
    if max_k == 0:  # no drafter: nothing to choose
        return 0, FixedK(0)
    if config.num_spec_tokens != "dynamic":
        k = fixed_k(config, max_k)
        return k, FixedK(k)
    grid = batch_grid(config.scheduling.max_num_seqs)
    profile = await cached_or_measured(stub, tokenizer, description, grid, profile_dir(config))
    logger.info("dynamic K over 0..%d; acceptance prior %s", max_k,
                [round(rate, 3) for rate in profile.acceptance_prior])
    return max_k, DynamicKPolicy(profile)
