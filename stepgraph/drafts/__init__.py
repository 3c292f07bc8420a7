"""The drafts users bring besides their own models: :class:`PromptLookupDraft` (n-gram matches in the
request's own tokens, no model) and trained EAGLE-3 and EAGLE-1/2 heads from their checkpoints
(:func:`load_eagle`)."""

from stepgraph.drafts.eagle import Eagle3Draft, EagleDraft, load_eagle
from stepgraph.drafts.prompt_lookup import PromptLookupDraft

__all__ = ["Eagle3Draft", "EagleDraft", "PromptLookupDraft", "load_eagle"]
