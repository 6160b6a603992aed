"""Config model, catalogs and CDK constructs of the MoE RL on EKS kit.

Layering: ``infra.catalog`` (facts) and ``infra.names`` / ``infra.versions`` / ``infra.problems`` /
``infra.strict`` at the bottom; ``infra.config`` reads them. None of these imports CDK, the planner, manifests or
ops. ``infra.planner`` reads config and catalogs; ``infra.constructs`` builds on config and
catalogs; ``stacks`` compose constructs; ``app.py`` reads the outside world once.
"""
