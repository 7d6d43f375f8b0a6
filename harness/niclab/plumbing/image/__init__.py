"""Guest images: recipes, their build, and the cache that holds them.

An image is what a backend boots: the micro image (a Debian kernel plus an
initramfs with everything in it), or a disk image (images/debian: a full
Debian on a qcow2 disk, with the same kernel and a slim initramfs that mounts
it). Both are recipes built by the same code into the same `Image` result.
"""

from niclab.plumbing.image.store import Image, ensure_image, find_image

__all__ = ["Image", "ensure_image", "find_image"]
