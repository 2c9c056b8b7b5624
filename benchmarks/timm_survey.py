"""timm survey: ``check_traceable`` with the default tracer on one timm model per family.

For each model: passed or not; where it does not trace, the diagnosis's first line and
its fix (verified or not), and whether the check passes with timm's own lists of what to
keep out of tracing (``timm.layers.get_notrace_modules()`` / ``get_notrace_functions()``,
which its fx feature extraction uses) -- so the fix found from the failure alone can be
held against what timm's authors registered by hand. Untrained models, eval mode,
1x3x64x64 (models with a fixed input size get theirs), one intra-op thread. Needs timm
(``pip install timm``; the test extra has it). About 30 s on one core.

Usage::

    python benchmarks/timm_survey.py [--models a,b,c]
"""

from __future__ import annotations

import argparse
import time
import warnings

import timm
import torch
from timm.layers import get_notrace_functions, get_notrace_modules

import pytest_fxtrace

FAMILIES = (
    "resnet18,efficientnet_b0,mobilenetv3_small_050,convnext_atto,vit_tiny_patch16_224,deit_tiny_patch16_224,"
    "swin_tiny_patch4_window7_224,regnetx_002,densenet121,dla34,dpn48b,ghostnet_050,hrnet_w18_small,inception_v3,"
    "levit_128s,mixer_b16_224,mobilevit_xxs,nfnet_l0,poolformer_s12,rexnet_100,selecsls42b,res2net50_14w_8s,"
    "resnest14d,cspresnet50,darknet17,tf_efficientnet_b0,xception41,coatnet_0_rw_224,maxvit_tiny_rw_224,"
    "efficientformer_l1,fastvit_t8,edgenext_xx_small,convmixer_768_32,crossvit_tiny_240,pit_ti_224,"
    "tnt_s_patch16_224,twins_svt_small,visformer_tiny,volo_d1_224,eva02_tiny_patch14_224,beit_base_patch16_224,"
    "cait_xxs24_224,gcvit_xxtiny,hgnetv2_b0,repvit_m1,tiny_vit_5m_224,vgg11,nest_tiny,sequencer2d_s,mambaout_femto"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=FAMILIES, help="comma-separated timm model names")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    notrace = {"leaf_modules": tuple(get_notrace_modules()), "autowrap_functions": tuple(get_notrace_functions())}
    names = {cls.__name__ for cls in notrace["leaf_modules"]} | {f.__name__ for f in notrace["autowrap_functions"]}
    counts = {"passed": 0, "fixed": 0, "as timm": 0, "other": 0}
    for name in args.models.split(","):
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        size = model.pretrained_cfg.get("input_size", (3, 224, 224))
        shape = size if model.pretrained_cfg.get("fixed_input_size") else (size[0], 64, 64)
        x = torch.randn(1, *shape, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        report = pytest_fxtrace.check_traceable(model, (x,))
        seconds = time.perf_counter() - start
        if report.ok:
            counts["passed"] += 1
            print(f"{name}: passed ({seconds:.1f} s)")
            continue
        with_timm = pytest_fxtrace.check_traceable(model, (x,), **notrace)
        suggestion = report.suggestion
        verified = suggestion is not None and suggestion.verified
        options = suggestion.options if verified else {}
        named = {str(v).rpartition(":")[2].rpartition(".")[2] for values in options.values() for v in values}
        if report.status != "untraceable":
            counts["other"] += 1
        elif verified:
            counts["fixed"] += 1
            counts["as timm"] += bool(named) and named <= names
        print(f"{name}: {report.status} {report.category or ''} ({seconds:.1f} s); with timm's lists: {with_timm.status}")
        print(f"    {report.message.splitlines()[0][:200]}")
        if suggestion is not None:
            print(f"    fix ({'verified' if verified else 'not verified'}): {suggestion.text[:160]}"
                  + (f"  [timm registers {', '.join(sorted(named & names))}]" if named & names else ""))
    models = len(args.models.split(","))
    untraceable = models - counts["passed"] - counts["other"]
    print(f"timm survey: {models} models: {counts['passed']} passed; {untraceable} untraceable, "
          f"{counts['fixed']} of them with a verified fix, {counts['as timm']} of those naming only what timm "
          f"keeps out of tracing; {counts['other']} other (model-error at this input size, mismatch)")


if __name__ == "__main__":
    main()
