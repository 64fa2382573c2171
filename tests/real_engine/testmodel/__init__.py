"""The real-engine tier's test model: a Llama whose weights are set by hand, a test instrument, not a
language model. It recalls the needle gate's planted values (and answers `` OK`` when a prompt holds none)
by construction: tokenizer in vocab.py, RoPE heads in rope.py, weights in weights.py, the folder in
tests/real_engine/model.py."""
