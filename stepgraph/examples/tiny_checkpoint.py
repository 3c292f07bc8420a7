"""A tiny Hugging Face checkpoint written to a local directory: a random-weight Llama and a byte-level
tokenizer trained on a few sentences, saved with ``save_pretrained``. It stands in for a model you
downloaded, so the examples and tests load one with ``from_pretrained`` without reaching the network.

Needs the ``hf`` extra (transformers, and the tokenizers library it brings).
"""

from __future__ import annotations

from pathlib import Path

TEXT = (
    "stepgraph captures each speculative decode step as one CUDA graph. "
    "A draft proposes tokens, the target verifies them, and the accepted ones are kept. "
    "The quick brown fox jumps over the lazy dog. "
) * 4


def write_tiny_llama(path: str | Path, *, layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random Llama (hidden 64, 4 heads, 2 KV heads) and its tokenizer into ``path``; returns
    the path. ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)``
    load them."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator([TEXT], trainer=trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path
