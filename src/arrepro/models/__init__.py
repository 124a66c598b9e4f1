from arrepro.models.backbone import LanguageModel
from arrepro.models.registry import MIXERS, available_mixers, get_mixer, register

__all__ = ["LanguageModel", "MIXERS", "available_mixers", "get_mixer", "register"]
