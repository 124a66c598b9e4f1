"""Reproduction of "Revisiting associative recall in modern recurrent models" (Okpekpe & Orvieto)."""

__version__ = "0.1.0"
