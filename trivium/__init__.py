"""trivium: reinforcement fine-tuning of language models and agents."""

__version__ = "0.1.0"
