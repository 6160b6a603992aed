"""CDK stacks: thin compositions of ``infra.constructs``, split by lifecycle."""
