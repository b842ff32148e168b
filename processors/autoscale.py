"""The scaling rule KEDA's Kafka scaler applies, as a pure function of lag and time.

KEDA exposes the total lag of a consumer group as an ``AverageValue`` external metric with
target ``lagThreshold``; the Horizontal Pod Autoscaler then wants
``ceil(total_lag / lagThreshold)`` replicas, clamped to ``[min, max]``. Below
``activationLagThreshold`` the scaler is inactive, and after ``cooldownPeriod`` of inactivity
the workload goes to ``minReplicaCount`` (which may be 0). Scale-down is stabilised: the HPA
takes the highest recommendation of the last ``stabilization_window_s`` seconds, so a brief dip
in lag doesn't kill workers that are about to be needed again. Scale-up is immediate.

``ocrstream scale`` feeds this rule with the lag it reads from Kafka and applies the decision to
local worker processes; the same numbers go into the KEDA ScaledObject in ``infra/k8s``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    min_replicas: int = 0
    max_replicas: int = 4
    lag_threshold: int = 20
    activation_lag_threshold: int = 0
    cooldown_s: float = 60.0
    stabilization_window_s: float = 60.0
    partitions: int | None = None  # replicas beyond the partition count would sit idle

    def __post_init__(self) -> None:
        if self.lag_threshold <= 0:
            raise ValueError("lag_threshold must be positive")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")

    @property
    def ceiling(self) -> int:
        if self.partitions is None:
            return self.max_replicas
        return max(self.min_replicas, min(self.max_replicas, self.partitions))


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    raw: int  # ceil(lag / threshold) before activation, clamping and stabilisation
    active: bool
    reason: str


class Autoscaler:
    """Stateful wrapper over :class:`ScalePolicy`: remembers recent recommendations."""

    def __init__(self, policy: ScalePolicy) -> None:
        self.policy = policy
        self._history: deque[tuple[float, int]] = deque()
        self._last_active: float | None = None

    def decide(self, now: float, total_lag: int, current: int) -> Decision:
        p = self.policy
        raw = math.ceil(max(total_lag, 0) / p.lag_threshold)
        active = total_lag > p.activation_lag_threshold
        if active:
            self._last_active = now
        if active:
            recommendation = max(1, raw)
            reason = f"lag {total_lag} / threshold {p.lag_threshold}"
        elif self._last_active is not None and now - self._last_active < p.cooldown_s:
            # Inactive, but KEDA keeps the workload up until the cooldown has passed.
            recommendation = max(1, raw)
            reason = "inactive, cooling down"
        else:
            recommendation = p.min_replicas
            reason = "inactive"
        recommendation = min(max(recommendation, p.min_replicas), p.ceiling)

        self._history.append((now, recommendation))
        while self._history and now - self._history[0][0] > p.stabilization_window_s:
            self._history.popleft()
        if recommendation >= current:
            desired = recommendation  # scale up (or stay) at once
        else:
            desired = min(current, max(r for _, r in self._history))
            if desired > recommendation:
                reason += ", scale-down stabilised"
        return Decision(desired=desired, raw=raw, active=active, reason=reason)
