"""Image files: the extensions trtkit reads as images (with pillow) wherever it takes a folder of them."""

from __future__ import annotations

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
