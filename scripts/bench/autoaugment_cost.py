"""The cost of ``data.augment=autoaugment``: fedrun's batched AutoAugment per image against torchvision's per-image
transform, for a loop-executor gather (64 images) and a vmap-executor gather (20 clients x 64), in one run.

    python scripts/bench/autoaugment_cost.py [--repeats N] [--out DIR]

Writes <out>/autoaugment-cpu.md (or -cuda on a GPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torchvision.transforms import AutoAugment, AutoAugmentPolicy

from fedrun.data.augment import AugmentedImages, minibatch
from fedrun.data.base import scale_images
from fedrun.rundir.files import device_name, git_commit


def per_image_us(fn, images: int, repeats: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats / images * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (5000, 3, 32, 32), dtype=torch.uint8, generator=g)
    x, _, stats = scale_images(pixels.numpy(), pixels[:10].numpy())
    inputs = AugmentedImages(x.to(device), stats, "cifar10", seed=0)
    reference = AutoAugment(AutoAugmentPolicy.CIFAR10)
    rows = ["| gather | fedrun (us/image) | torchvision per image (us/image) | ratio |", "|---|---|---|---|"]
    for shape in ((64,), (20, 64)):
        idx = torch.randint(0, len(pixels), shape, generator=g).to(device)
        ours = per_image_us(lambda: minibatch(inputs, idx, 0), idx.numel(), args.repeats)
        batch = pixels[idx.flatten().cpu()].to(device)
        theirs = per_image_us(lambda: torch.stack([reference(im) for im in batch]), idx.numel(), args.repeats)
        rows.append(f"| {' x '.join(map(str, shape))} | {ours:.0f} | {theirs:.0f} | {theirs / ours:.1f} |")
    command = "python scripts/bench/autoaugment_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# AutoAugment cost per training image (CIFAR-10 policy, 3x32x32)\n\nMade by `{command}` at commit "
            f"{git_commit()} on {time.strftime('%Y-%m-%d')} on {device_name(device)}; mean of {args.repeats} "
            "gathers.\n\n" + "\n".join(rows) + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"autoaugment-{device.type}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
