"""Preflight two or more Sparks together through torch.distributed (issue 8)."""
