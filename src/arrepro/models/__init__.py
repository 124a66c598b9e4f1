from .backbone import LanguageModel
from .registry import MIXERS, available_mixers, get_mixer, register

__all__ = ["LanguageModel", "MIXERS", "available_mixers", "get_mixer", "register"]
