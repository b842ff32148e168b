"""The local autoscaler follows KEDA's rule: ceil(lag / threshold), activation, cooldown,
scale-down stabilisation and the partition cap."""

from __future__ import annotations

import pytest

from ocrstream.processors.autoscale import Autoscaler, ScalePolicy


def test_desired_is_ceil_of_lag_over_threshold_clamped_to_max() -> None:
    a = Autoscaler(ScalePolicy(min_replicas=1, max_replicas=8, lag_threshold=10))
    assert a.decide(0.0, 1, current=1).desired == 1
    assert a.decide(1.0, 31, current=1).desired == 4
    assert a.decide(2.0, 10_000, current=4).desired == 8


def test_partition_cap_limits_replicas() -> None:
    a = Autoscaler(ScalePolicy(min_replicas=0, max_replicas=100, lag_threshold=1, partitions=6))
    assert a.decide(0.0, 500, current=0).desired == 6


def test_below_activation_threshold_scales_to_min_after_cooldown() -> None:
    policy = ScalePolicy(
        min_replicas=0,
        max_replicas=4,
        lag_threshold=10,
        activation_lag_threshold=5,
        cooldown_s=30,
        stabilization_window_s=0,
    )
    a = Autoscaler(policy)
    assert a.decide(0.0, 40, current=0).desired == 4
    # Lag drops under activation: stay up during the cooldown ...
    assert a.decide(10.0, 3, current=4).desired == 1
    # ... and go to zero once it has passed.
    d = a.decide(45.0, 3, current=1)
    assert d.desired == 0
    assert not d.active


def test_never_activated_stays_at_min() -> None:
    a = Autoscaler(ScalePolicy(min_replicas=0, lag_threshold=10, activation_lag_threshold=5))
    assert a.decide(0.0, 4, current=0).desired == 0


def test_scale_down_is_stabilised_but_scale_up_is_immediate() -> None:
    a = Autoscaler(
        ScalePolicy(min_replicas=1, max_replicas=10, lag_threshold=10, stabilization_window_s=60)
    )
    assert a.decide(0.0, 80, current=1).desired == 8
    # Lag falls: the highest recommendation of the last 60 s still holds.
    d = a.decide(20.0, 10, current=8)
    assert d.desired == 8
    assert "stabilised" in d.reason
    # After the window, the lower recommendation wins.
    assert a.decide(81.0, 10, current=8).desired == 1
    # A new burst scales up at once.
    assert a.decide(82.0, 95, current=1).desired == 10


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"lag_threshold": 0}, "lag_threshold"), ({"min_replicas": 5, "max_replicas": 2}, "min")],
)
def test_invalid_policy_is_refused(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ScalePolicy(**kwargs)
