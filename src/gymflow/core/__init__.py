"""What every layer shares: tasks, records, statuses, prompts and the resources protocol."""
