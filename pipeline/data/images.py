"""A folder dataset's images, decoded by one rule decided from all of them.

Every image of a folder dataset becomes one array shape, so a rule must say which channels and
which size. Taken from the first image read, one greyscale JPEG that sorted first turned CIFAR-10
grey and one 96x96 image scaled every image up ninefold, silently. The rule now reads every
image's header first (cheap: no pixels are decoded) and takes the **most common** channels
(greyscale or RGB; a tie goes to RGB, which loses nothing) and the **most common size** (a tie
goes to the larger); the others are converted or resized, and the line that says so names how
many and an example of each. Images with more than 8 bits per channel are scaled to 8 bits;
32-bit integer and float pixels, unreadable files and images over Pillow's pixel limit (a
"decompression bomb") are refused in one line that names the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from pipeline.data.config import DataError

# Pillow's single-channel modes of more than 8 bits, by bit depth. Pillow's own conversion to
# 8 bits clips them (values above 255 become 255: most of a 16-bit image); they are scaled.
WIDE_MODES = {"I;16": 16, "I;16L": 16, "I;16B": 16, "I;16N": 16}
GREY_MODES = {"1", "L", "LA", *WIDE_MODES}


@dataclass(frozen=True)
class ImageRule:
    mode: str  # "L" (one channel) or "RGB"
    size: tuple[int, int]  # (W, H), as Pillow gives it
    line: str  # what was decided, in words: logged and tagged on every run that reads the data

    @property
    def shape(self) -> tuple[int, int, int]:  # (C, H, W)
        return (1 if self.mode == "L" else 3, self.size[1], self.size[0])


def _depth(img) -> int | None:
    depth = WIDE_MODES.get(img.mode)
    if depth is None and img.mode == "I" and img.format == "PNG":
        depth = 16  # PNG holds at most 16 bits per channel; Pillow may open them as 32-bit "I"
    if depth is None and img.mode in ("I", "F"):
        kind = "32-bit integer" if img.mode == "I" else "floating-point"
        raise DataError(
            f"{kind} pixels (mode {img.mode}) have no bit depth to scale to 8 bits by; "
            "save the images with 8 or 16 bits per channel"
        )
    return depth


def _opened(file: BinaryIO, name: str):
    """Pillow's image of ``file`` (not yet decoded), or one line naming the file."""
    from PIL import Image, UnidentifiedImageError

    if hasattr(file, "seek"):
        file.seek(0)
    try:
        return Image.open(file)
    except UnidentifiedImageError:  # its own text names a file object, not the file
        raise DataError(f"cannot read image {name}: not an image, or a damaged one") from None
    except Image.DecompressionBombError:
        raise DataError(
            f"image {name} has more pixels than Pillow reads safely (over {2 * Image.MAX_IMAGE_PIXELS:,}, "
            "a decompression bomb or a huge scan): shrink it or take it out"
        ) from None
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read image {name}: {err}") from None


def header(file, name: str) -> tuple[str, tuple[int, int]]:
    """The image's channels as the rule counts them ("L" or "RGB") and its size, from its header."""
    with _opened(file, name) as img:
        try:
            grey = _depth(img) is not None or img.mode in GREY_MODES
        except DataError as err:
            raise DataError(f"image {name}: {err}") from None
        return ("L" if grey else "RGB"), img.size


def decide(headers: list[tuple[str, str, tuple[int, int]]]) -> ImageRule:
    """The rule for images whose (name, channels, size) are ``headers`` (in reading order)."""
    modes = Counter(mode for _, mode, _ in headers)
    sizes = Counter(size for _, _, size in headers)
    mode = max(modes, key=lambda m: (modes[m], m == "RGB"))
    size = max(sizes, key=lambda s: (sizes[s], s[0] * s[1]))
    rule = ImageRule(mode, size, "")
    c, h, w = rule.shape
    parts = [
        f"{len(headers):,} images as {c}x{h}x{w} ({'greyscale' if mode == 'L' else 'RGB'}, the most common)"
    ]
    converted = [name for name, m, _ in headers if m != mode]
    if converted:
        other = "RGB" if mode == "L" else "greyscale"
        parts.append(f"{len(converted):,} {other} converted (e.g. {converted[0]})")
    resized = [(name, s) for name, _, s in headers if s != size]
    if resized:
        name, (rw, rh) = resized[0]
        parts.append(f"{len(resized):,} of other sizes resized to {w}x{h} (e.g. {name}, {rw}x{rh})")
    return ImageRule(mode, size, "; ".join(parts))


def decode(file, name: str, rule: ImageRule) -> np.ndarray:
    """One image as uint8 (H, W) or (H, W, 3) by ``rule``."""
    from PIL import Image

    with _opened(file, name) as img:
        try:
            img.load()
            depth = _depth(img)
            if depth is not None:
                wide = np.asarray(img).astype(np.float64)  # (H, W), 0 .. 2**depth - 1
                scaled = np.round(wide * 255 / (2**depth - 1)).clip(0, 255).astype(np.uint8)
                img = Image.fromarray(scaled, mode="L")
            img = img.convert(rule.mode)
            if img.size != rule.size:
                img = img.resize(rule.size)
            return np.asarray(img, dtype=np.uint8)
        except DataError as err:
            raise DataError(f"cannot read image {name}: {err}") from None
        except (OSError, ValueError) as err:
            raise DataError(f"cannot read image {name}: {err}") from None
