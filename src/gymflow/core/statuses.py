"""The statuses a rollout and a verification end in, as the store holds them."""

# Rollout statuses. A failed rollout is not scored: it counts in coverage, never as reward 0.
COMPLETED = "completed"
FAILED = "failed"

# Verification statuses.
VERIFIED = "ok"
VERIFY_ERROR = "error"
