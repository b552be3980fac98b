"""Folder datasets decoded by one rule decided from all their images (pipeline/data/images.py):
an odd first image no longer sets the channels or the size, the decision is said in one line
and a tag, oversized and broken images are refused naming the file; and a fuzz over random
folders (modes, sizes, formats, bad files) that either refuses in one line or loads what it
said it decided."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pipeline.data.config import DataConfig, DataError
from pipeline.data.images import decide
from pipeline.data.sources import load_folder
from pipeline.data.splits import load_data


def _save(path: Path, mode: str, size: tuple[int, int], seed: int = 0, fmt: str = "png") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w, h = size
    if mode == "RGB":
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    elif mode == "I;16":
        img = Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))
    else:
        img = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8)).convert(mode)
    img.save(path.with_suffix("." + fmt))


def _folder(root: Path, per_class: int = 4, size=(8, 8), mode="RGB") -> Path:
    for c in ("cat", "dog"):
        for i in range(per_class):
            _save(root / c / f"{i:04d}", mode, size, seed=i)
    return root


def test_an_odd_first_image_sets_neither_the_channels_nor_the_size(tmp_path, capsys):
    root = _folder(tmp_path / "d", per_class=6)
    _save(root / "cat" / "0000", "L", (8, 8))  # greyscale, and first in sorted order
    _save(root / "dog" / "0000", "RGB", (24, 24))  # a bigger one
    raw = load_folder(str(root))
    assert raw.train_x.shape[1:] == (3, 8, 8)
    said = capsys.readouterr().err
    assert "12 images as 3x8x8 (RGB, the most common)" in said
    assert "1 greyscale converted (e.g. " in said and "cat/0000.png" in said
    assert "1 of other sizes resized to 8x8 (e.g. " in said and "24x24" in said
    assert raw.image_rule in said


def test_the_decision_is_tagged_on_the_run_and_a_capped_subset_is_said(tracking, tmp_path, capsys):
    from click.testing import CliRunner

    from pipeline import train_static

    root = _folder(tmp_path / "d", per_class=20)
    result = CliRunner().invoke(
        train_static.main,
        ["--dataset", f"folder:{root}", "--val-size", "6", "--subset", "5000", "--epochs", "1",
         "--spec", "tiny", "--scores-run", "none"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "note: --subset 5000 keeps every example of the training split (27)" in result.stderr
    import mlflow

    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.data.tags["data_images"] == "40 images as 3x8x8 (RGB, the most common)"


def test_ties_go_to_rgb_and_to_the_larger_size():
    rule = decide([("a", "L", (8, 8)), ("b", "RGB", (16, 16))])
    assert rule.mode == "RGB" and rule.size == (16, 16) and rule.shape == (3, 16, 16)


def _png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG whose header claims ``width`` x ``height`` pixels (no image data follows)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)


def test_an_image_over_pillows_pixel_limit_is_refused_naming_it(tmp_path):
    root = _folder(tmp_path / "d")
    _png_header_only(root / "dog" / "huge.png", 30000, 30000)
    with pytest.raises(DataError, match=r"image .*dog/huge\.png has more pixels than Pillow reads safely"):
        load_folder(str(root))


MODES = ("L", "RGB", "RGBA", "P", "LA", "1", "I;16")


@st.composite
def folders(draw):
    """A small class-folder dataset: each image a random mode, size and format, sometimes a bad file."""
    images = []
    for c in ("a", "b"):
        for i in range(draw(st.integers(3, 6))):
            mode = draw(st.sampled_from(MODES))
            fmt = "png" if mode in ("I;16", "LA") else draw(st.sampled_from(["png", "bmp", "jpg", "tiff"]))
            if fmt == "jpg" and mode not in ("L", "RGB"):
                fmt = "png"
            size = draw(st.sampled_from([(6, 6), (6, 6), (9, 5), (12, 12)]))
            images.append((c, i, mode, size, fmt))
    bad = draw(st.sampled_from([None, "text", "empty"]))
    return images, bad


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=folders())
def test_any_folder_refuses_in_one_line_or_loads_what_it_said(tmp_path_factory, case):
    images, bad = case
    root = tmp_path_factory.mktemp("fuzz")
    for c, i, mode, size, fmt in images:
        _save(root / c / f"{i:02d}", mode, size, seed=i, fmt=fmt)
    if bad == "text":
        (root / "a" / "zz.png").write_text("not an image")
    elif bad == "empty":
        (root / "b" / "zz.jpg").write_bytes(b"")
    try:
        data = load_data(DataConfig(dataset=f"folder:{root}", val_size=2), include_test=True)
    except DataError as err:  # one line; a bad file is found first (headers are read before anything)
        assert "\n" not in str(err) and (bad is None or "zz." in str(err)), err
        return
    assert bad is None
    rule = data.image_rule
    c, h, w = data.input_shape
    assert rule.startswith(f"{len(images)} images as {c}x{h}x{w} ")
    # each file's mode as read back: a palette of greys saved as BMP reads back as "L"
    read_back = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with Image.open(path) as img:
            read_back.append(img.mode)
    kinds = ["L" if m in ("L", "LA", "1", "I;16", "I") else "RGB" for m in read_back]
    assert (c == 3) == (kinds.count("RGB") >= kinds.count("L"))


def test_evaluate_reads_back_a_data_folder_logged_as_a_digest(tracking, tmp_path):
    """A --dataset over 100 characters is logged as a digest with its text as an artifact;
    evaluate must reload the data from that text, not take the digest for a dataset name."""
    import mlflow
    from click.testing import CliRunner

    from pipeline import evaluate, train_static

    root = _folder(tmp_path / ("long-" * 20) / "d", per_class=20)
    dataset = f"folder:{root}"
    trained = CliRunner().invoke(
        train_static.main,
        ["--dataset", dataset, "--val-size", "6", "--epochs", "1", "--spec", "tiny",
         "--scores-run", "none", "--progress", "false"],
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.data.params["dataset"].startswith("sha256:")  # what the run logged
    evaluated = CliRunner().invoke(evaluate.main, ["--runs", run.info.run_id])
    assert evaluated.exit_code == 0, evaluated.output
    assert "test/acc" in mlflow.get_run(run.info.run_id).data.metrics
