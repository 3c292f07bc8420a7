"""The drafts users bring besides their own models: :class:`PromptLookupDraft` (n-gram matches in the
request's own tokens, no model) and trained EAGLE-3 heads from their checkpoints (:func:`load_eagle3`)."""

from stepgraph.drafts.eagle3 import Eagle3Draft, load_eagle3
from stepgraph.drafts.prompt_lookup import PromptLookupDraft

__all__ = ["Eagle3Draft", "PromptLookupDraft", "load_eagle3"]
