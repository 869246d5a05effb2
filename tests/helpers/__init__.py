"""What the tests share: tiny models, the deliberate mutants, family configs."""
