"""Guest images: recipes, their build, and the cache that holds them.

An image is what a backend boots. Today there is one kind, the micro image
(a Debian kernel plus an initramfs); a full disk image can join later as
another recipe with the same `Image` result.
"""

from niclab.image.store import Image, ensure_image, find_image

__all__ = ["Image", "ensure_image", "find_image"]
