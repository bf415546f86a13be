"""kl-bitexact: bit-exact logprob consistency as a merge gate for LLM inference engines."""

__version__ = "0.1.0"
