"""The sandbox: bwrap profile, seccomp filter, per-call cgroups, idmapped workspaces."""

from shellwardd.sandbox.runner import ProcessOutcome, Sandbox, SandboxSpec

__all__ = ["ProcessOutcome", "Sandbox", "SandboxSpec"]
