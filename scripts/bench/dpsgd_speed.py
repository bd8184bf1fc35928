"""DP-SGD step time: fedrun's ``algo/local=dpsgd`` against Opacus on the same model and minibatch.

    pip install opacus   # the benchmark's only extra
    python scripts/bench/dpsgd_speed.py [--model mlp] [--data digits] [--batch 64] [--steps 20] [--repeats 5]
                                        [--out FILE]

Both take a DP-SGD step of one client (per-sample gradients, each clipped to norm 1, Gaussian noise of multiplier 1,
the mean over the minibatch, an SGD step) on the same model, initial parameters and minibatches, on one thread: fedrun
through its rule (``DPSGD.gradient`` and the local step), Opacus through ``PrivacyEngine.make_private`` (its
GradSampleModule and DPOptimizer, Poisson sampling off). Each side runs ``--steps`` steps per repeat, warmed up, in
``--repeats`` interleaved repeats; the table gives the medians and their ratio, all from this one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch


def fedrun_side(sim, batches, lr: float):
    """A function running fedrun's DP-SGD steps over ``batches`` from the initial model."""
    from fedrun.algorithms.base import ClientContext
    from fedrun.algorithms.schema import make

    rule = make("local", "dpsgd", clip=1.0, noise_multiplier=1.0, batch_size=len(batches[0][0]))
    ctx = ClientContext(1, sim.state.params, sim.state.buffers, lr)
    start = {"dp_steps": torch.zeros((), dtype=torch.float64), "dp_rate": torch.zeros((), dtype=torch.float64)}

    def run():
        state = rule.client_init(ctx, start)
        for x, y in batches:
            state, _ = rule.client_step(sim.model, ctx, state, x, y)
        return state["w"]

    return run


def opacus_side(sim, cfg, batches, lr: float):
    """The same steps through Opacus on a fresh nn.Module of the model holding the same initial parameters."""
    from opacus import PrivacyEngine

    from fedrun.data import get_spec
    from fedrun.model.zoo import build_model

    kind = get_spec(cfg.data.name).meta(cfg.data)[0]
    module, _ = build_model(cfg.model, kind, sim.data.input_shape, sim.data.num_classes, cfg.data.name)
    torch.nn.utils.vector_to_parameters(sim.state.params.clone(), module.parameters())
    data = torch.utils.data.TensorDataset(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))
    loader = torch.utils.data.DataLoader(data, batch_size=len(batches[0][0]))
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    model, optimizer, loader = PrivacyEngine().make_private(module=module, optimizer=optimizer, data_loader=loader,
                                                            noise_multiplier=1.0, max_grad_norm=1.0,
                                                            poisson_sampling=False)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run():
        for x, y in batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()

    return run


def step_times(run, repeats: int, steps: int) -> list[float]:
    """Seconds a step over ``repeats`` runs of ``run`` (``steps`` steps each), after one warm-up run."""
    run()  # warm-up
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        out.append((time.perf_counter() - start) / steps)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--data", default="digits")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from fedrun.config.compose import compose_config
    from fedrun.engine.run.simulation import Simulation
    from fedrun.rundir.files import device_name, git_commit

    cfg = compose_config([f"data={args.data}", f"model={args.model}", "hardware=cpu", "hardware.num_threads=1",
                          "fl.num_clients=1", "fl.clients_per_round=1"])
    sim = Simulation.from_config(cfg)
    x, y = sim.data.x_train, sim.data.y_train
    batches = [(x[i * args.batch:(i + 1) * args.batch], y[i * args.batch:(i + 1) * args.batch])
               for i in range(args.steps)]
    ours, theirs = fedrun_side(sim, batches, 0.05), opacus_side(sim, cfg, batches, 0.05)
    times = {"fedrun": [], "opacus": []}
    for _ in range(args.repeats):  # interleaved, so that a change of the machine's load hits both
        times["fedrun"] += step_times(ours, 1, args.steps)
        times["opacus"] += step_times(theirs, 1, args.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    import opacus

    command = "python scripts/bench/dpsgd_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        f"# DP-SGD step time: fedrun against Opacus {opacus.__version__}",
        "",
        f"Made by `{command}` at commit {git_commit()} on {time.strftime('%Y-%m-%d')} on {device_name(sim.device)}: "
        f"model={args.model} ({sim.model.dim} parameters), data={args.data}, B = {args.batch}, "
        f"{args.steps} steps a repeat, {args.repeats} interleaved repeats (medians).",
        "",
        "| fedrun (ms a step) | Opacus (ms a step) | Opacus / fedrun |",
        "|---|---|---|",
        f"| {1e3 * med['fedrun']:.3f} | {1e3 * med['opacus']:.3f} | {med['opacus'] / med['fedrun']:.2f} |",
        "",
    ])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
