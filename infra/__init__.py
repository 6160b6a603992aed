"""Config model, catalogs and CDK constructs of the MoE RL on EKS kit.

Layering: ``infra.config`` / ``infra.catalog`` / ``infra.names`` / ``infra.versions`` import no CDK;
``infra.constructs`` builds on them; ``stacks`` compose constructs; ``app.py`` reads the outside
world once.
"""
