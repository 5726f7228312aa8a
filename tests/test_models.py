"""benchmark.models: exact parameter counts, shapes, torch.func compatibility, errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from benchmark import models

# --------------------------------------------------------------------------------------------------
# Parameter counts derived by hand from the papers' text/tables (conv: k*k*c_in*c_out (+ c_out bias);
# BN/GN: 2*c; linear: in*out (+ out)). Conv layers "same"-padded, pools floor.

# fedbat_cnn, no biases (Table 4 + code), BN after each conv:
#   convs 1*9*32=288 | 32*9*64=18432 | 64*9*128=73728 | 128*9*256=294912 ; BN 2*(32+64+128+256)=960
#   FMNIST 28->14->7->3->1: Linear(256,10)=2560      -> 288+18432+73728+294912+960+2560   = 390,880
#   SVHN   32->16->8->4->2: Linear(1024,10)=10240, first conv 3*9*32=864
#                                                    -> 864+18432+73728+294912+960+10240  = 399,136
# fedbat_resnet10 (Table 4 widths 32/64/128/256, no biases, BN, projection shortcuts):
#   stem 3*9*32=864 + BN 64                                                   =     928
#   block 32->32 (s1): 2*(9*32*32) + 2*64                                     =  18,560
#   block 32->64 (s2): 9*32*64 + 9*64*64 + 32*64 (1x1) + 3*128                =  57,728
#   block 64->128:     9*64*128 + 9*128*128 + 64*128 + 3*256                  = 230,144
#   block 128->256:    9*128*256 + 9*256*256 + 128*256 + 3*512                = 919,040
#   Linear(256,10), no bias = 2,560                          total (10 cls)   = 1,228,960
#   Linear(256,100) = 25,600                                 total (100 cls)  = 1,252,000
# fedbat_resnet10 wide=True (code: 64/128/256/512), same arithmetic           = 4,903,232 (10 cls)
#   = 4 * 1,228,960 - 12,608 (stem has 3 input channels, fc is 512x10): "about 4x" as fedbat.md says.
# lfl_cnn_mnist: 1*9*32+32=320 | 32*9*64+64=18,496 | 64*9*64+64=36,928 | 28->14->7->3: FC 576*128+128
#   =73,856 | 128*10+10=1,290                                                 = 130,890
# lfl_cnn_cifar10: 896 | 9,248 | 18,496 | 36,928 | 73,856 | 147,584 | 32->16->8->4: FC 2048*128+128
#   =262,272 | 1,290                                                          = 550,570
# bherd_cnn MNIST: 25*1*32+32=832 | 25*32*32+32=25,632 | FC 1568*256+256=401,664 | 256*10+10=2,570
#                                                                             = 430,698
#   CIFAR-10: first conv 25*3*32+32=2,432, FC 2048*256+256=524,544           = 555,178
# bherd_svm: 784 weights, no bias                                             =     784
# gradma_mlp: 784*200+200=157,000 | BN 400 | 200*100+100=20,100 | BN 200 | 100*10+10=1,010
#                                                                             = 178,710
# gradma_lenet5: 3*25*32+32=2,432 | BN 64 | 32*25*64+64=51,264 | BN 128 | 1600*512+512=819,712 |
#   BN 1,024 | 512*128+128=65,664 | BN 256 | 128*10+10=1,290                  = 941,834
# VGG-11 convs (config A, with bias): 1,792 + 73,856 + 295,168 + 590,080 + 1,180,160 + 3*2,359,808
#                                                                             = 9,220,480
# gradma_vgg11: convs + BN 2*(64+128+256*2+512*4)=5,504 + 512*128+128=65,664 + 128*100+100=12,900
#                                                                             = 9,304,548
# fedswa_vgg11: convs + 512*256+256=131,328 + 256*100+100=25,700 (CIFAR-100)  = 9,377,508
#               convs + 512*100+100=51,300 + 100*10+10=1,010 (CIFAR-10)       = 9,272,790
# gradma_resnet20 (He et al. n=3, option A, BN): stem 432+32 | stage1 6*(2,304+32)=14,016 |
#   stage2 (4,608+64)+(9,216+64)+4*(9,216+64)=51,072 | stage3 (18,432+128)+(36,864+128)+4*(36,864+128)
#   =203,520 | FC 64*10+10=650                                                = 269,722 (He et al.: 0.27M)
#   FC 64*200+200=13,000 (Tiny-ImageNet)                                      = 282,072
# fedswa_resnet18_gn: stem 1,728 + GN 128 | layer1 4*(36,864+128)=147,968 |
#   layer2 (73,728+256)+(147,456+256)+(8,192+256)+2*(147,456+256)=525,568 |
#   layer3 (294,912+512)+(589,824+512)+(32,768+512)+2*(589,824+512)=2,099,712 |
#   layer4 (1,179,648+1,024)+(2,359,296+1,024)+(131,072+1,024)+2*(2,359,296+1,024)=8,393,728 |
#   FC 512*100+100=51,300 -> 11,220,132 (CIFAR-100); FC 512*10+10=5,130    -> 11,173,962 (CIFAR-10)
# fedswa_lenet5: 3*25*64+64=4,864 | 64*25*64+64=102,464 | 1600*384+384=614,784 | 384*192+192=73,920 |
#   192*10+10=1,930 -> 797,962 (CIFAR-10); 192*100+100=19,300               -> 815,332 (CIFAR-100)
# niid_simple_cnn FMNIST: 25*6+6=156 | 25*6*16+16=2,416 | 28->24->12->8->4: FC 256*120+120=30,840 |
#   120*84+84=10,164 | 84*10+10=850                                          =  44,426
#   CIFAR-10: first conv 25*3*6+6=456, 32->28->14->10->5: FC 400*120+120=48,120 = 62,006
# logreg digits: 64*10+10 = 650 ; MNIST 784*10+10 = 7,850
# linear: 60*1+1 = 61 ; mlp digits: 64*200+200 + 200*10+10 = 15,010 ; hidden=32: 64*32+32+32*10+10 = 2,410

COUNTS = [
    ("fedbat_cnn", (1, 28, 28), 10, {}, 390_880),
    ("fedbat_cnn", (3, 32, 32), 10, {}, 399_136),
    ("fedbat_resnet10", (3, 32, 32), 10, {}, 1_228_960),
    ("fedbat_resnet10", (3, 32, 32), 100, {}, 1_252_000),
    ("fedbat_resnet10", (3, 32, 32), 10, {"wide": True}, 4_903_232),
    ("lfl_cnn_mnist", (1, 28, 28), 10, {}, 130_890),
    ("lfl_cnn_cifar10", (3, 32, 32), 10, {}, 550_570),
    ("bherd_cnn", (1, 28, 28), 10, {}, 430_698),
    ("bherd_cnn", (3, 32, 32), 10, {}, 555_178),
    ("bherd_svm", (1, 28, 28), 1, {}, 784),
    ("gradma_mlp", (1, 28, 28), 10, {}, 178_710),
    ("gradma_lenet5", (3, 32, 32), 10, {}, 941_834),
    ("gradma_vgg11", (3, 32, 32), 100, {}, 9_304_548),
    ("gradma_resnet20", (3, 64, 64), 200, {}, 282_072),
    ("gradma_resnet20", (3, 32, 32), 10, {}, 269_722),
    ("fedswa_resnet18_gn", (3, 32, 32), 100, {}, 11_220_132),
    ("fedswa_resnet18_gn", (3, 32, 32), 10, {}, 11_173_962),
    ("fedswa_lenet5", (3, 32, 32), 10, {}, 797_962),
    ("fedswa_lenet5", (3, 32, 32), 100, {}, 815_332),
    ("fedswa_vgg11", (3, 32, 32), 100, {}, 9_377_508),
    ("fedswa_vgg11", (3, 32, 32), 10, {}, 9_272_790),
    ("niid_simple_cnn", (1, 28, 28), 10, {}, 44_426),
    ("niid_simple_cnn", (3, 32, 32), 10, {}, 62_006),
    ("logreg", (1, 8, 8), 10, {}, 650),
    ("logreg", (1, 28, 28), 10, {}, 7_850),
    ("linear", (60,), 1, {}, 61),
    ("mlp", (1, 8, 8), 10, {}, 15_010),
    ("mlp", (1, 8, 8), 10, {"hidden": 32}, 2_410),
]


def _meta_build(name, shape, k, **opts):
    with torch.device("meta"):
        return models.build(name, shape, k, **opts)


@pytest.mark.parametrize("name,shape,k,opts,expected", COUNTS,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}{'-' + str(c[3]) if c[3] else ''}"
                              for c in COUNTS])
def test_parameter_count(name, shape, k, opts, expected):
    assert models.param_count(_meta_build(name, shape, k, **opts)) == expected


def test_every_model_has_a_count():
    assert {c[0] for c in COUNTS} == set(models.names())


def test_paper_printed_and_stated_sizes():
    # He et al. (2016), Table 6: ResNet-20 has 0.27M parameters (GradMA cites it as "Resnet20 [6]").
    assert round(models.param_count(_meta_build("gradma_resnet20", (3, 32, 32), 10)) / 1e6, 2) == 0.27
    # FedBAT Table 4: the CNN's linear layer is Linear(256, 10) on FMNIST and Linear(1024, 10) on SVHN.
    assert _meta_build("fedbat_cnn", (1, 28, 28), 10)[-1].in_features == 256
    assert _meta_build("fedbat_cnn", (3, 32, 32), 10)[-1].in_features == 1024
    # BHerd Sec. 1.2: "a 1568x256 fully connected layer, a 256x10 fully connected layer".
    fcs = [m for m in _meta_build("bherd_cnn", (1, 28, 28), 10).modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in fcs] == [(1568, 256), (256, 10)]
    # fedbat.md: the public code's ResNet-10 has about 4x the parameters of Table 4's.
    ratio = (models.param_count(_meta_build("fedbat_resnet10", (3, 32, 32), 10, wide=True))
             / models.param_count(_meta_build("fedbat_resnet10", (3, 32, 32), 10)))
    assert 3.9 < ratio < 4.1


# --------------------------------------------------------------------------------------------------
# Forward shapes on the paper's inputs, determinism, functorch hygiene


@pytest.mark.parametrize("name", models.names())
def test_forward_shape_on_paper_input(name):
    spec = models.SPECS[name]
    torch.manual_seed(0)
    m = models.build(name, spec.default_input, spec.default_classes)
    out = m.train()(torch.randn(3, *spec.default_input))
    assert out.shape == (3, spec.default_classes)
    assert torch.isfinite(out).all()
    m.eval()
    with torch.no_grad():
        assert m(torch.randn(1, *spec.default_input)).shape == (1, spec.default_classes)


def test_fedbat_cnn_on_svhn_and_bherd_cnn_on_cifar():
    assert models.build("fedbat_cnn", (3, 32, 32), 10)(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert models.build("bherd_cnn", (3, 32, 32), 10)(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("name", ["fedbat_cnn", "lfl_cnn_mnist", "gradma_lenet5", "mlp", "gradma_mlp"])
def test_initialisation_is_seeded(name):
    spec = models.SPECS[name]
    torch.manual_seed(7)
    a = torch.nn.utils.parameters_to_vector(models.build(name, spec.default_input, 10).parameters())
    torch.manual_seed(7)
    b = torch.nn.utils.parameters_to_vector(models.build(name, spec.default_input, 10).parameters())
    torch.manual_seed(8)
    c = torch.nn.utils.parameters_to_vector(models.build(name, spec.default_input, 10).parameters())
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bherd_svm_is_zero_initialised_and_linear():
    m = models.build("bherd_svm", (1, 28, 28), 2)
    assert all((p == 0).all() for p in m.parameters())
    assert m.fedrepro_loss == "squared_hinge"
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        m[-1].weight.normal_()
        assert torch.allclose(m(x)[:, 0], x.flatten(1) @ m[-1].weight[0], atol=1e-5)


@pytest.mark.parametrize("name", models.names())
def test_no_inplace_layers(name):
    spec = models.SPECS[name]
    for mod in _meta_build(name, spec.default_input, spec.default_classes).modules():
        assert not getattr(mod, "inplace", False), f"{name}: {mod} is in-place"


def test_dropout_option_removes_only_dropout():
    for name in ("lfl_cnn_mnist", "lfl_cnn_cifar10", "gradma_lenet5", "gradma_vgg11"):
        spec = models.SPECS[name]
        on = _meta_build(name, spec.default_input, spec.default_classes)
        off = _meta_build(name, spec.default_input, spec.default_classes, dropout=False)
        assert any(isinstance(m, torch.nn.Dropout) for m in on.modules())
        assert not any(isinstance(m, torch.nn.Dropout) for m in off.modules())
        assert models.param_count(on) == models.param_count(off)


def test_fedswa_resnet18_uses_groupnorm_with_two_groups():
    m = _meta_build("fedswa_resnet18_gn", (3, 32, 32), 100)
    norms = [mod for mod in m.modules() if isinstance(mod, (torch.nn.GroupNorm, torch.nn.BatchNorm2d))]
    assert len(norms) == 1 + 8 * 2 + 3 and all(isinstance(n, torch.nn.GroupNorm) and n.num_groups == 2
                                                for n in norms)


def test_describe_lines():
    for name in models.names():
        line = models.describe(name)
        assert "\n" not in line and line.startswith(name + ":")
        spec = models.SPECS[name]
        n = models.param_count(_meta_build(name, spec.default_input, spec.default_classes))
        assert f"{n:,} parameters" in line
    assert "Table 4" in models.describe("fedbat_cnn")


# --------------------------------------------------------------------------------------------------
# torch.func: vmap(grad(functional_call)) over 2 stacked copies equals a per-copy loop

SMALL = ["fedbat_cnn", "lfl_cnn_mnist", "lfl_cnn_cifar10", "bherd_cnn", "bherd_svm", "gradma_mlp",
         "gradma_lenet5", "fedswa_lenet5", "niid_simple_cnn", "logreg", "linear", "mlp"]
BIG = ["fedbat_resnet10", "gradma_resnet20", "fedswa_resnet18_gn", "gradma_vgg11", "fedswa_vgg11"]
DROPOUT = {"lfl_cnn_mnist", "lfl_cnn_cifar10", "gradma_lenet5", "gradma_vgg11"}


def _loss(name, out, y):
    if name == "bherd_svm":  # squared hinge with labels in {-1, +1} (see bherd_svm's docstring)
        return 0.5 * F.relu(1 - y * out[:, 0]).pow(2).mean()
    if name == "linear":
        return F.mse_loss(out[:, 0], y)
    return F.cross_entropy(out, y)


def _setup(name, batch, small_input=False, **opts):
    spec = models.SPECS[name]
    shape = spec.default_input
    if small_input and name == "gradma_resnet20":
        shape = (3, 32, 32)  # same parameters; keeps the CPU test fast
    k = spec.default_classes
    torch.manual_seed(0)
    model = models.build(name, shape, k, **opts).train()
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    g = torch.Generator().manual_seed(1)
    # two different copies (as two clients after some local steps)
    stacked = {n: torch.stack([p, p + 0.01 * torch.randn(p.shape, generator=g)]) for n, p in params.items()}
    x = torch.randn(2, batch, *shape, generator=g)
    if name == "bherd_svm":
        y = torch.randint(0, 2, (2, batch), generator=g).float() * 2 - 1
    elif name == "linear":
        y = torch.randn(2, batch, generator=g)
    else:
        y = torch.randint(0, k, (2, batch), generator=g)
    return model, stacked, buffers, x, y


def _vmap_vs_loop(name, batch, small_input=False, **opts):
    model, stacked, buffers, x, y = _setup(name, batch, small_input, **opts)

    def loss_fn(p, b, xb, yb):
        return _loss(name, functional_call(model, (p, b), (xb,)), yb)

    bufs = {n: torch.stack([t, t]).clone() for n, t in buffers.items()}
    gv = vmap(grad(loss_fn))(stacked, bufs, x, y)
    for i in range(2):
        p_i = {n: t[i] for n, t in stacked.items()}
        b_i = {n: t.clone() for n, t in buffers.items()}
        g_i = grad(loss_fn)(p_i, b_i, x[i], y[i])
        for n in g_i:  # batched vs unbatched kernels round differently; a conv bias
            # before BatchNorm has an exactly-zero gradient, seen as ~1e-6 noise: hence the atol
            err = (gv[n][i] - g_i[n]).norm()
            assert err <= 1e-4 * g_i[n].norm() + 1e-5, f"{name}: {n} copy {i}: {err}"
        for n, t in b_i.items():  # BatchNorm running statistics: same in-place update per copy
            assert torch.allclose(bufs[n][i].float(), t.float(), rtol=1e-4, atol=1e-6), f"{name}: {n}"
    assert any(gv[n].abs().sum() > 0 for n in gv)


@pytest.mark.parametrize("name", SMALL)
def test_vmap_grad_matches_loop_small(name):
    _vmap_vs_loop(name, batch=4, **({"dropout": False} if name in DROPOUT else {}))


@pytest.mark.parametrize("name", BIG)
def test_vmap_grad_matches_loop_big(name):
    _vmap_vs_loop(name, batch=2, small_input=True, **({"dropout": False} if name in DROPOUT else {}))


@pytest.mark.parametrize("name", ["lfl_cnn_mnist", "gradma_lenet5"])
def test_vmap_with_dropout_needs_randomness_flag(name):
    model, stacked, buffers, x, y = _setup(name, batch=4)

    def loss_fn(p, b, xb, yb):
        return _loss(name, functional_call(model, (p, b), (xb,)), yb)

    bufs = {n: torch.stack([t, t]).clone() for n, t in buffers.items()}
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(grad(loss_fn))(stacked, bufs, x, y)
    gv = vmap(grad(loss_fn), randomness="different")(stacked, bufs, x, y)
    assert all(torch.isfinite(t).all() for t in gv.values())


# --------------------------------------------------------------------------------------------------
# Errors


def test_unknown_name_lists_names_and_hints():
    with pytest.raises(ValueError, match=r"did you mean 'fedbat_cnn'.*Known models: .*logreg"):
        models.build("fedbat_cn", (1, 28, 28), 10)
    with pytest.raises(ValueError, match="unknown model 'resnet50'"):
        models.describe("resnet50")


@pytest.mark.parametrize("name,shape", [
    ("fedbat_cnn", (28, 28)),          # missing channel axis
    ("fedbat_cnn", (1, 8, 8)),         # too small for four 2x2 pools
    ("gradma_vgg11", (3, 16, 16)),     # five pools need >= 32
    ("lfl_cnn_mnist", (784,)),         # flat input to a CNN
    ("gradma_lenet5", (3, 12, 12)),
    ("logreg", ()),
    ("mlp", (0, 5)),
])
def test_bad_input_shape_says_what_is_expected(name, shape):
    with pytest.raises(ValueError, match=rf"{name} expects input_shape .*got"):
        models.build(name, shape, 10)


def test_bad_options_and_classes():
    with pytest.raises(ValueError, match="unknown option.*wide"):
        models.build("fedbat_cnn", (1, 28, 28), 10, wide=True)
    with pytest.raises(ValueError, match="num_classes must be 1 or 2"):
        models.build("bherd_svm", (1, 28, 28), 10)
    with pytest.raises(ValueError, match="positive integer"):
        models.build("logreg", (64,), 0)
