"""Drafts that are not a user's model: :class:`PromptLookupDraft` (n-gram matches in the request's own
tokens)."""

from stepgraph.drafts.prompt_lookup import PromptLookupDraft

__all__ = ["PromptLookupDraft"]
