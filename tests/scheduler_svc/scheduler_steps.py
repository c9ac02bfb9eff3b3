"""Driving a Scheduler in tests: results fed back as the executor would."""

from __future__ import annotations

from scheduler_svc.scheduler import Scheduler


def complete_step(scheduler: Scheduler, output, token: int = 7) -> None:
    """Feed back one sampled token for every request the step samples."""
    for request_id in output.sampling_request_ids:
        request = scheduler.accept_result(output, request_id)
        if request is not None:
            request.output_token_ids.append(token)
