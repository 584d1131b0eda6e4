#!/usr/bin/env python3
"""Golden numbers for verl-cpp's optimizer layer (include/verl/trainer/optim), from torch.

Writes tests/data/optim/optim_golden.json with:
  - adamw: torch.optim.AdamW trajectories (float32 parameters, several steps, a learning rate
    that changes between steps as a scheduler would set it);
  - clip_grad_norm: torch.nn.utils.clip_grad_norm_ on lists of gradients (returned total norm and
    the clipped gradients), including non-finite gradients;
  - schedules: verl's get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup
    multipliers, evaluated through torch's LambdaLR (lr after k scheduler steps).

Run: python3 tools/scripts/make_optim_golden.py  (needs torch; the output is committed).
"""
import json
import math
import pathlib

import torch
from torch.optim.lr_scheduler import LambdaLR

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "optim" / "optim_golden.json"


def floats(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


# verl.utils.torch_functional's schedules, restated here (same formulas) so that this script
# needs only torch.
def constant_with_warmup(num_warmup_steps):
    def f(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1.0, num_warmup_steps))
        return 1.0

    return f


def cosine_with_warmup(num_warmup_steps, num_training_steps, min_lr_ratio=0.0, num_cycles=0.5):
    coef = (1 - min_lr_ratio) * 0.5
    intercept = (1 + min_lr_ratio) * 0.5

    def f(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        x = math.cos(math.pi * float(num_cycles) * 2.0 * progress)
        return max(min_lr_ratio, x * coef + intercept)

    return f


def adamw_case(name, shapes, steps, lr_per_step, betas, eps, weight_decay, seed):
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in shapes]
    initial = [floats(p) for p in params]
    opt = torch.optim.AdamW(params, lr=lr_per_step[0], betas=betas, eps=eps, weight_decay=weight_decay)
    grads_per_step = []
    for k in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_per_step[k]
        grads = [torch.randn(*s, generator=g) * (0.1 + k) for s in shapes]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        opt.step()
        grads_per_step.append([floats(gr) for gr in grads])
    state = [opt.state[p] for p in params]
    return {
        "name": name,
        "shapes": [list(s) for s in shapes],
        "lr_per_step": lr_per_step,
        "betas": list(betas),
        "eps": eps,
        "weight_decay": weight_decay,
        "initial": initial,
        "grads": grads_per_step,
        "final": [floats(p) for p in params],
        "exp_avg": [floats(s["exp_avg"]) for s in state],
        "exp_avg_sq": [floats(s["exp_avg_sq"]) for s in state],
    }


def clip_case(name, grads, max_norm, norm_type=2.0):
    tensors = [torch.nn.Parameter(torch.zeros(len(gr))) for gr in grads]
    for t, gr in zip(tensors, grads):
        t.grad = torch.tensor(gr, dtype=torch.float32)
    total = torch.nn.utils.clip_grad_norm_(tensors, max_norm=max_norm, norm_type=norm_type)

    def enc(x):
        return x if math.isfinite(x) else str(x)  # strict JSON has no inf/nan: "inf", "nan"

    return {
        "name": name,
        "grads": [[enc(v) for v in gr] for gr in grads],
        "max_norm": max_norm,
        "norm_type": enc(norm_type),
        "total_norm": enc(float(total)),
        "clipped": [[enc(float(v)) for v in t.grad.tolist()] for t in tensors],
    }


def schedule_case(name, kind, base_lr, steps, **kw):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    fn = constant_with_warmup(**kw) if kind == "constant" else cosine_with_warmup(**kw)
    sched = LambdaLR(opt, fn)
    lrs = []
    for _ in range(steps):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return {"name": name, "type": kind, "base_lr": base_lr, "params": kw, "lrs": lrs}


def main():
    torch.set_num_threads(1)
    adamw = [
        adamw_case("defaults", [(3, 5), (7,)], 4, [1e-3] * 4, (0.9, 0.999), 1e-8, 0.01, 1),
        adamw_case("no_weight_decay", [(4, 4)], 5, [3e-4] * 5, (0.9, 0.999), 1e-8, 0.0, 2),
        adamw_case("verl_actor_lr_warmup", [(2, 9), (5,)], 6, [0.0, 2e-7, 4e-7, 6e-7, 8e-7, 1e-6], (0.9, 0.999), 1e-8, 0.01, 3),
        adamw_case("betas_0_5_strong_decay", [(6,)], 5, [1e-2] * 5, (0.5, 0.95), 1e-6, 0.1, 4),
        adamw_case("small_beta1", [(33,)], 3, [5e-3] * 3, (0.3, 0.99), 1e-8, 0.05, 5),
        adamw_case("large_vector", [(1000,)], 3, [1e-3] * 3, (0.9, 0.999), 1e-8, 0.01, 6),
    ]
    g = torch.Generator().manual_seed(7)
    rand = lambda n, s=1.0: [float(x) for x in (torch.randn(n, generator=g) * s).tolist()]
    clip = [
        clip_case("clipped", [rand(5), rand(3)], 1.0),
        clip_case("under_the_limit", [rand(4, 0.01), rand(2, 0.01)], 1.0),
        clip_case("verl_critic_large_grads", [rand(64, 3.0), rand(17, 5.0), rand(1, 2.0)], 1.0),
        clip_case("max_norm_small", [rand(8)], 0.05),
        clip_case("inf_grad", [[1.0, float("inf")], [2.0]], 1.0),
        clip_case("nan_grad", [[1.0, float("nan")], [2.0]], 1.0),
        clip_case("norm_type_inf", [rand(6), rand(3)], 0.5, float("inf")),
        clip_case("norm_type_1", [rand(6), rand(3)], 0.5, 1.0),
        clip_case("zero_grads", [[0.0, 0.0, 0.0]], 1.0),
    ]
    schedules = [
        schedule_case("constant_no_warmup", "constant", 1e-6, 8, num_warmup_steps=0),
        schedule_case("constant_warmup_5", "constant", 1e-6, 10, num_warmup_steps=5),
        schedule_case("cosine_defaults", "cosine", 1e-5, 25, num_warmup_steps=3, num_training_steps=20),
        schedule_case("cosine_min_lr", "cosine", 2e-6, 30, num_warmup_steps=0, num_training_steps=25, min_lr_ratio=0.1),
        schedule_case("cosine_full_cycle", "cosine", 1e-4, 20, num_warmup_steps=2, num_training_steps=18, min_lr_ratio=0.05, num_cycles=1.0),
        schedule_case("cosine_warmup_equals_total", "cosine", 1e-4, 8, num_warmup_steps=6, num_training_steps=6),
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    payload = {"torch_version": torch.__version__, "adamw": adamw, "clip_grad_norm": clip, "schedules": schedules}
    OUT.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
