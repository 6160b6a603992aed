"""CDK constructs of the kit, one concern per file."""
