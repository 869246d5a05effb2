"""The window policy: long windows when the batch is nearly empty, plain ar when it is full."""

from jacobigen.core.sampling import SamplingConfig
from jacobigen.serve.fields import Group
from jacobigen.serve.policy import BEST, WindowPolicy

SAMPLING = SamplingConfig(cfg=3.0, top_k=200)


def test_window_narrows_as_the_batch_fills():
    policy = WindowPolicy(max_batch=8)
    picks = [policy.group(load, SAMPLING) for load in range(1, 17)]
    windows = [g.window for g in picks]
    assert picks[0] == Group(BEST, 32, SAMPLING) and picks[-1] == Group("ar", 1, SAMPLING)
    assert windows == sorted(windows, reverse=True)


def test_a_request_joins_the_rung_of_a_nearby_load_only():
    policy = WindowPolicy(max_batch=8)
    longest, ar = Group(BEST, 32, SAMPLING), Group("ar", 1, SAMPLING)
    assert policy.fits(longest, 1, SAMPLING) and policy.fits(longest, 2, SAMPLING)
    assert not policy.fits(longest, 3, SAMPLING)
    assert not policy.fits(longest, 16, SAMPLING) and policy.fits(ar, 16, SAMPLING)
    assert not policy.fits(longest, 1, SamplingConfig(cfg=1.0))  # other sampling: another engine
    two = WindowPolicy(8, ((BEST, 16), ("ar", 1)), (0.5,))  # calibrated down to two rungs
    assert two.fits(Group(BEST, 16, SAMPLING), 5, SAMPLING) and not two.fits(Group(BEST, 16, SAMPLING), 8, SAMPLING)


def test_calibration_keeps_the_rungs_that_pay():
    policy = WindowPolicy(max_batch=8)
    where_wide_is_free = {(BEST, 32): 1.0, (BEST, 16): 1.5, ("ar", 1): 4.0}  # seconds per image, as on a GPU
    assert policy.calibrated(lambda m, w: where_wide_is_free[m, w]) == policy
    small_cpu = {(BEST, 32): 2.9, (BEST, 16): 2.4, ("ar", 1): 2.3}  # as measured on 2 cores
    only_ar = policy.calibrated(lambda m, w: small_cpu[m, w])
    assert only_ar.rungs == (("ar", 1),) and only_ar.group(1, SAMPLING) == Group("ar", 1, SAMPLING)
    middle = {(BEST, 32): 2.5, (BEST, 16): 2.0, ("ar", 1): 3.0}
    assert policy.calibrated(lambda m, w: middle[m, w]).rungs == ((BEST, 16), ("ar", 1))


def test_a_step_stays_within_its_token_bound():
    """rows x block tokens per step at most ``step_tokens``: a wide block holds fewer images, one wider
    than the bound holds none (the server refuses it)."""
    policy = WindowPolicy(max_batch=8, step_tokens=1024)
    assert policy.batch_for(2) == 8  # ar, guided: the batch's own limit
    assert policy.batch_for(2 * 256) == 2 and policy.batch_for(1024) == 1 and policy.batch_for(2 * 4368) == 0
    cut = WindowPolicy(8, step_tokens=512).calibrated(lambda m, w: {BEST: 3.0, "ar": 2.0}[m])
    assert cut.step_tokens == 512 and cut.rungs == (("ar", 1),)  # calibration keeps the bound
