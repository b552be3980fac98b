"""The whiten layer type (airbench's patch-whitening stem): its shape and parameters, filters that
whiten the patches they were fitted to, training that fits them on the training images before
its first step and keeps them through a resume and in the logged model, and the bad input."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn import functional as F

from models.builder import build_model, count_parameters, fit_to_data, fitted_to_data
from models.flops import flops_per_example
from models.growth_event import GrowthError
from models.io import load_model, save_model
from models.layers import LAYERS, SpecError
from models.layers.whiten import WhitenLayer
from models.schedule import parse_schedule, validate_schedule
from models.spec import ArchSpec, infer_shapes, resolve_spec
from pipeline.difficulty.cross_fit import FoldPlan
from pipeline.difficulty.folds import Fold
from pipeline.training import epoch_loop
from pipeline.training.checkpoints import load_checkpoint, save_checkpoint
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan

CIFAR = ((3, 32, 32), 10)


def _whitened_spec(data) -> ArchSpec:
    """A small network with a whitening stem, for ``data``'s images."""
    layers = [
        {"id": "stem", "type": "whiten"},
        {"id": "c1", "type": "convbn", "out_channels": 8},
        {"id": "p1", "type": "pool"},
        {"id": "gap", "type": "gap"},
    ]
    return ArchSpec(data.input_shape, data.num_classes, tuple(layers))


def _correlated_images(n: int = 200) -> torch.Tensor:
    """RGB images whose neighbouring pixels and channels are strongly correlated, as photos are."""
    generator = torch.Generator().manual_seed(0)
    grey = F.avg_pool2d(torch.randn(n, 1, 36, 36, generator=generator), 5, stride=1)  # (n, 1, 32, 32)
    return torch.cat(
        [grey * s + 0.1 * torch.randn(n, 1, 32, 32, generator=generator) for s in (1, 0.8, 0.6)], 1
    )


def test_a_whiten_layer_has_the_shape_and_parameters_its_entry_says():
    layer = {"id": "stem", "type": "whiten", "kernel_size": 2, "eps": 5e-4}
    kind = LAYERS["whiten"]
    assert kind.output_shape(layer, (3, 32, 32)) == (24, 31, 31)  # 3 x 2 x 2 filters, either sign
    module = kind.build(layer, (3, 32, 32))
    assert module(torch.zeros(2, 3, 32, 32)).shape == (2, 24, 31, 31)
    assert kind.params(layer, (3, 32, 32)) == count_parameters(module) == 24  # the bias: filters are a buffer
    assert [name for name, _ in module.named_buffers()] == ["weight"]
    assert kind.output_shape({**layer, "kernel_size": 3}, (1, 28, 28)) == (18, 26, 26)


def test_fitted_filters_whiten_the_patches_they_were_fitted_to():
    images = _correlated_images()
    layer = WhitenLayer(3, 2, eps=1e-9)
    layer.fit(images)
    with torch.no_grad():
        out = F.conv2d(images.double(), layer.weight.double())  # before the ReLU: (n, 24, 31, 31)
    first = out[:, :12].transpose(0, 1).reshape(12, -1)
    second_moment = first @ first.T / first.shape[1]  # uncentred, as the filters were fitted
    torch.testing.assert_close(second_moment, torch.eye(12, dtype=torch.float64), atol=1e-4, rtol=0)
    torch.testing.assert_close(out[:, 12:], -out[:, :12])  # each filter with either sign
    raw = F.unfold(images.double(), 2).transpose(1, 2).reshape(-1, 12)
    raw_moment = raw.T @ raw / raw.shape[0]  # the pixels' own: far from white
    eigenvalues = torch.linalg.eigvalsh(raw_moment)
    assert eigenvalues.max() > 20 * eigenvalues.min()


def test_the_filters_come_largest_eigenvalue_first_and_eps_damps_the_smallest():
    images = _correlated_images()
    eps = 0.03  # between the patches' smallest eigenvalues (about 0.01) and their largest (0.27)
    damped = WhitenLayer(3, 2, eps=eps)
    damped.fit(images)
    with torch.no_grad():
        out = F.conv2d(images.double(), damped.weight.double())[:, :12]
    raw = F.unfold(images.double(), 2).transpose(1, 2).reshape(-1, 12)
    eigenvalues = torch.linalg.eigvalsh(raw.T @ raw / raw.shape[0]).flip(0)  # largest first
    variance = out.pow(2).mean((0, 2, 3))  # each filter's output: eigenvalue / (eigenvalue + eps)
    torch.testing.assert_close(variance, eigenvalues / (eigenvalues + eps), atol=1e-6, rtol=1e-6)
    assert variance[0] > 0.85 and variance[-1] < 0.3


def test_resnet_short_whiten_is_the_baseline_with_a_whitening_stem():
    plain, whitened = resolve_spec("resnet-short", *CIFAR), resolve_spec("resnet-short-whiten", *CIFAR)
    assert whitened.layers[0] == {"id": "stem", "type": "whiten", "kernel_size": 2, "eps": 5e-4}
    assert whitened.layers[1:] == plain.layers[1:]
    assert infer_shapes(whitened)[1] == (24, 31, 31) == (infer_shapes(plain)[1][0], 31, 31)


def test_fit_to_data_sets_the_first_layer_and_nothing_else(small_data):
    spec = _whitened_spec(small_data)
    torch.manual_seed(0)
    model = build_model(spec).train()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    images = small_data.train.x[:300]
    assert fitted_to_data(spec)
    fit_to_data(model, images)
    expected = WhitenLayer(1, 2, 5e-4)
    expected.fit(images)
    torch.testing.assert_close(model.layers["stem"].weight, expected.weight)
    after = model.state_dict()
    assert [n for n in after if not torch.equal(after[n], before[n])] == ["layers.stem.weight"]
    assert model.training  # its mode as it was
    tiny = build_model(resolve_spec("tiny", small_data.input_shape, 10))
    assert not fitted_to_data(tiny.spec)
    with pytest.raises(ValueError, match="is not fitted to data"):
        fit_to_data(tiny, images)
    with pytest.raises(ValueError, match="no training images"):
        fit_to_data(model, images[:0])


def _fresh(spec: ArchSpec, cfg: TrainConfig):
    torch.manual_seed(cfg.seed)
    return new_state(spec, cfg, torch.device("cpu"))


def _fitted_on(images: torch.Tensor) -> torch.Tensor:
    layer = WhitenLayer(images.shape[1], 2, 5e-4)
    layer.fit(images)
    return layer.weight


def test_training_fits_the_stem_on_the_training_images_before_its_first_step(small_data):
    """The filters a run trains with are the fit on its training images (no validation or test
    image), and the weight average a run ends on carries them too."""
    for ema in (0.0, 0.9):
        cfg = TrainConfig(
            epochs=2, batch_size=100, deterministic=True, seed=5, monitor_share=0, ema_decay=ema
        )
        state = _fresh(_whitened_spec(small_data), cfg)
        random_filters = state.model.layers["stem"].weight.clone()
        state = fit(state, small_data, cfg, TrainingPlan())
        got = state.model.layers["stem"].weight
        assert not torch.equal(got, random_filters)
        torch.testing.assert_close(got, _fitted_on(small_data.train.x))  # 2,000 images: all of them
        assert state.history[-1]["val/acc"] > 0.3  # it trains (chance is 0.1)
        assert state.time_parts["train"] <= state.cumulative_s  # the fit's seconds count in both


def test_a_large_split_is_sampled_across_its_order(small_data, monkeypatch):
    """A folder dataset's split is ordered by class: the fit draws its images across the split
    with a fixed seed, not the first ones."""
    monkeypatch.setattr(epoch_loop, "FIT_IMAGES", 300)
    cfg = TrainConfig(epochs=1, batch_size=100, deterministic=True, seed=5, monitor_share=0)
    fitted = []
    for seed in (5, 6):  # the draw does not follow the run's seed
        state = fit(
            _fresh(_whitened_spec(small_data), dataclasses.replace(cfg, seed=seed)),
            small_data,
            cfg,
            TrainingPlan(),
        )
        fitted.append(state.model.layers["stem"].weight)
    torch.testing.assert_close(fitted[0], fitted[1])
    n = len(small_data.train)
    drawn = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:300].sort().values
    assert drawn.max() > n // 2  # spread over the split
    torch.testing.assert_close(fitted[0], _fitted_on(small_data.train.x[drawn]))
    assert not torch.allclose(fitted[0], _fitted_on(small_data.train.x[:300]))


def test_a_resumed_run_keeps_its_checkpoints_filters(small_data, tmp_path):
    """Resuming never refits: filters marked in the checkpoint are the ones the run ends with
    (training leaves the frozen filters alone)."""
    cfg = TrainConfig(epochs=3, batch_size=100, deterministic=True, seed=5, monitor_share=0)
    spec, path = _whitened_spec(small_data), tmp_path / "ckpt.pt"

    def checkpoint_then_crash(state, plan):
        save_checkpoint(path, state, plan, cfg)
        if state.epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(_fresh(spec, cfg), small_data, cfg, TrainingPlan(), checkpoint=checkpoint_then_crash)
    saved = torch.load(path, weights_only=True)
    marked = saved["model"]["layers.stem.weight"] * 2
    saved["model"]["layers.stem.weight"] = marked
    torch.save(saved, path)
    plan = TrainingPlan()
    resumed = fit(load_checkpoint(path, cfg, plan, torch.device("cpu")), small_data, cfg, plan)
    assert resumed.epoch == 3
    torch.testing.assert_close(resumed.model.layers["stem"].weight, marked)


def test_a_cross_fit_fold_fits_its_stem_on_its_own_examples_only(small_data):
    """A fold model scores the examples it held out: its whitening must not have seen them."""
    n = len(small_data.train)
    trained_on, held_out = torch.arange(0, n, 2), torch.arange(1, n, 2)
    plan = FoldPlan(Fold(repeat=0, fold=0, seed=1, trained_on=trained_on, held_out=held_out))
    assert torch.equal(plan.fit_positions(small_data), trained_on)
    cfg = TrainConfig(epochs=1, batch_size=100, deterministic=True, seed=1, monitor_share=0)
    torch.manual_seed(cfg.seed)
    state = fit(new_state(_whitened_spec(small_data), cfg, torch.device("cpu")), small_data, cfg, plan)
    torch.testing.assert_close(state.model.layers["stem"].weight, _fitted_on(small_data.train.x[trained_on]))


def test_a_saved_whitened_network_loads_with_its_fitted_filters(small_data, tmp_path):
    model = build_model(_whitened_spec(small_data)).eval()
    fit_to_data(model, small_data.train.x[:300])
    loaded = load_model(save_model(model, tmp_path / "model")).eval()
    torch.testing.assert_close(loaded.layers["stem"].weight, model.layers["stem"].weight)
    x = small_data.val.x[:16]
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"eps": 0}, "layer 'stem': eps must be a positive number, got 0"),
        ({"eps": "small"}, "layer 'stem': eps must be a positive number, got 'small'"),
        ({"kernel_size": 0}, "layer 'stem': kernel_size must be a positive integer, got 0"),
        ({"kernel_size": 40}, "layer 'stem': whiten's 40x40 patches do not fit the 32x32 map"),
    ],
)
def test_a_whiten_layer_that_cannot_be_built_is_refused_by_name(change, message):
    layers = ({"id": "stem", "type": "whiten", **change}, {"id": "gap", "type": "gap"})
    with pytest.raises(SpecError, match=message):
        infer_shapes(ArchSpec((3, 32, 32), 10, layers))


def test_a_whiten_layer_must_come_first_so_growth_cannot_change_what_it_sees():
    layers = [{"id": "c0", "type": "convbn", "out_channels": 8}, {"id": "stem", "type": "whiten"}]
    with pytest.raises(
        SpecError,
        match="'stem': a whiten layer is fitted to the images, so it must be the network's first layer",
    ):
        infer_shapes(ArchSpec((3, 32, 32), 10, tuple(layers)))
    exit_layers = ({"id": "w", "type": "whiten"},)
    spec = dict(
        resolve_spec("resnet-short-whiten", *CIFAR).to_dict(),
        exits=[{"id": "x1", "after": "g1res", "layers": exit_layers}],
    )
    with pytest.raises(SpecError, match="must be the network's first layer, not in exit 'x1'"):
        infer_shapes(ArchSpec.from_dict(spec))
    with pytest.raises(GrowthError, match="a whiten layer is in a network from its start"):
        parse_schedule("2:whiten")
    whitened = resolve_spec("resnet-short-whiten", *CIFAR)
    with pytest.raises(GrowthError, match="'stem': a whiten layer is fitted to the images, so it must be"):
        validate_schedule(whitened, parse_schedule("3:convbn(16)@before:stem", 12), 12)
    with pytest.raises(GrowthError, match="a whiten layer has no width to widen"):
        validate_schedule(whitened, parse_schedule("3:stem=widen(width=48)", 12), 12)


def test_a_whitening_stem_counts_in_the_flops():
    spec = ArchSpec((3, 32, 32), 10, ({"id": "stem", "type": "whiten"}, {"id": "gap", "type": "gap"}))
    stem = 2 * 24 * 12 * 31 * 31  # a multiply and an add per tap of 24 filters of 2x2x3, at 31 x 31 places
    assert flops_per_example(build_model(spec), (3, 32, 32))["forward"] == stem + 2 * 24 * 10  # and the head
