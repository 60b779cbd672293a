"""The tiny tool-calling chat model of the TRL tests (it lives in the reference package, where
``bench/budgetmix_trl.py`` uses it too)."""

from analyses.budgetmix.reference.tinylm import (  # noqa: F401
    SPECIAL_TOKENS,
    WarmStartOptions,
    build_model,
    build_tokenizer,
    chat_tokenizer,
    scripted_conversations,
    supervised_warm_start,
    tool_call,
)
