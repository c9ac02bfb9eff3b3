"""xIELU (executor_svc/models/xielu.py) against transformers' own Python implementation, on both branches and the
small negative values its eps clamp changes."""

from __future__ import annotations

import torch

from executor_svc.models.xielu import xielu


def test_xielu_equals_transformers_on_both_branches_and_at_the_clamp():
    from transformers.activations import XIELUActivation

    reference = XIELUActivation(alpha_p_init=1.3, alpha_n_init=0.9, beta=0.4, eps=-1e-3, dtype=torch.float32)
    parameters = torch.cat([reference.alpha_p.detach(), reference.alpha_n.detach(), reference.beta.view(1),
                            reference.eps.view(1)])
    x = torch.cat([torch.linspace(-6, 6, 97), torch.tensor([-1e-4, -1e-3, -2e-3, 0.0, 1e-4])])
    with torch.no_grad():
        expected = reference._xielu_python(x)
    torch.testing.assert_close(xielu(x, parameters), expected, rtol=0, atol=0)
    clamped_away = xielu(torch.tensor([-1e-4]), torch.cat([parameters[:3], torch.tensor([0.0])]))
    assert not torch.equal(clamped_away, expected[-5:-4])  # the clamp to eps matters there
