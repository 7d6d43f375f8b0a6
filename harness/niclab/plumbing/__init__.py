"""niclab's plumbing layer: everything that touches a host, a guest or a card.

It imports niclab.model and niclab.base. Its modules and the job of each: docs/architecture.md, "plumbing".
"""
