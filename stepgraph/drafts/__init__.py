"""The drafts users bring besides their own models: :class:`PromptLookupDraft` (n-gram matches in the
request's own tokens, no model), trained EAGLE-3 and EAGLE-1/2 heads from their checkpoints
(:func:`load_eagle`), and the MTP layer a target's checkpoint ships (:func:`load_mtp`)."""

from stepgraph.drafts.eagle import Eagle3Draft, EagleDraft, load_eagle
from stepgraph.drafts.mtp import MTPDraft, load_mtp
from stepgraph.drafts.prompt_lookup import PromptLookupDraft

__all__ = ["Eagle3Draft", "EagleDraft", "MTPDraft", "PromptLookupDraft", "load_eagle", "load_mtp"]
