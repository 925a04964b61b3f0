"""The statuses a rollout and a verification end in, as the store holds them."""

# Rollout statuses. A failed rollout is not scored: it counts in coverage, never as reward 0.
COMPLETED = "completed"
FAILED = "failed"

# Verification statuses.
VERIFIED = "ok"
VERIFY_ERROR = "error"

# Failure kinds of an external agent under the `command` harness: the agent, not the model's
# answer, ended the rollout. Never a reward, never a wrong answer.
AGENT_CRASHED = "agent_crashed"
AGENT_TIMEOUT = "agent_timeout"
AGENT_STEP_LIMIT = "agent_step_limit"
AGENT_INSTALL_MISSING = "agent_install_missing"
SANDBOX_ERROR = "sandbox_error"
AGENT_FAILURES = (
    AGENT_CRASHED,
    AGENT_TIMEOUT,
    AGENT_STEP_LIMIT,
    AGENT_INSTALL_MISSING,
    SANDBOX_ERROR,
)
