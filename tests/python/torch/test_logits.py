"""normkit.torch.logits: LogitsStatisticsFunction against torch.log_softmax / entropy compositions,
gradcheck in double, bf16 bit-equal to normkit.credit, strided rows and bad input."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit import credit  # noqa: E402

nt = normkit.torch


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale).to(dtype)


def tokens_for(shape, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, tuple(shape), generator=g, dtype=torch.int64)


def reference(z, y, tau):
    logp = torch.log_softmax(z.double() / tau, dim=-1)
    return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1, 15, 17, 33, 2100])
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_forward_and_backward_against_torch(dtype, vocab, tau):
    z = randn(2, 3, vocab, dtype=dtype, scale=2.0).requires_grad_()
    y = tokens_for((2, 3), vocab)
    log_p, entropy = nt.logits_statistics(z, y, temperature=tau)
    stat = torch.float64 if dtype == torch.float64 else torch.float32
    assert log_p.shape == entropy.shape == (2, 3) and log_p.dtype == entropy.dtype == stat
    assert not entropy.requires_grad and log_p.requires_grad
    ref_logp, ref_h = reference(z.detach(), y, tau)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=3e-5, atol=3e-5)
    torch.testing.assert_close(log_p.double(), ref_logp, **tol)
    torch.testing.assert_close(entropy.double(), ref_h, **tol)
    g = randn(2, 3, dtype=stat, seed=5)
    (log_p * g).sum().backward()
    z64 = z.detach().double().requires_grad_()
    (reference(z64, y, tau)[0] * g.double()).sum().backward()
    assert z.grad.dtype == dtype
    gtol = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(z.grad.double(), z64.grad, rtol=gtol, atol=gtol * g.abs().max().item() / tau)  # the scale |g|/τ


def test_gradcheck_double():
    z = randn(4, 9, seed=3).requires_grad_()
    y = tokens_for((4,), 9)
    assert torch.autograd.gradcheck(lambda x: nt.logits_statistics(x, y, temperature=0.7)[0], (z,))
    y = tokens_for((3,), 17)
    assert torch.autograd.gradcheck(lambda x: nt.LogitsStatisticsFunction.apply(x, y, credit.logits_options())[0],
                                    (randn(3, 17, seed=4).requires_grad_(),), eps=1e-6, atol=1e-5)


def test_bf16_bits_strided_rows_and_options():
    z = randn(8, 33, dtype=torch.bfloat16, seed=7)
    y = tokens_for((8,), 33)
    log_p, entropy = nt.logits_statistics(z, y)
    bits = z.view(torch.int16).numpy().view(np.uint16)
    ref = credit.logits_statistics(bits, y.numpy())
    assert log_p.numpy().tobytes() == ref[0].tobytes() and entropy.numpy().tobytes() == ref[1].tobytes()
    big = randn(16, 33, seed=8)
    rows = big[::2]  # a row stride of 66: passed as it is
    a = nt.logits_statistics(rows, y, options=credit.logits_options(), threads=2)
    b = nt.logits_statistics(rows.contiguous(), y)
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_bad_input():
    z = randn(3, 5)
    with pytest.raises(TypeError, match="tokens has dtype torch.int32"):
        nt.logits_statistics(z, torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="tokens has shape"):
        nt.logits_statistics(z, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(TypeError, match="unexpected keyword argument 'tau'"):
        nt.logits_statistics(z, torch.zeros(3, dtype=torch.int64), tau=2.0)
    with pytest.raises(TypeError, match="logits has dtype torch.int64"):
        nt.logits_statistics(z.long(), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError):  # a token id outside [0, V)
        nt.logits_statistics(z, torch.tensor([0, 1, 5]))
