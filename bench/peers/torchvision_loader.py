#!/usr/bin/env python3
"""torchvision peer of dtrain's bench_loader: images/s per loader worker of the ImageNet
training pipeline on the same JPEGs.

The pipeline is the one of torchvision's ImageNet reference recipe: RandomResizedCrop(224)
(scale 0.08-1, ratio 3/4-4/3, bilinear with antialiasing), RandomHorizontalFlip, conversion
to float and Normalize(ImageNet mean, std), over datasets.ImageFolder(ROOT/train), shuffled,
through a DataLoader with --workers worker processes (persistent, so that the timed pass
reuses the warm one's workers) and batch --batch. Pipelines (--pipelines, all by default):
  pil       datasets.ImageFolder's default PIL loader and the classic transforms
            (transforms.RandomResizedCrop, ..., ToTensor, Normalize): what most users run;
  pil_v2    the PIL loader with transforms.v2 (ToImage, then the crop and flip on the
            uint8 tensor, ToDtype(float32, scale=True), Normalize);
  tensor    torchvision.io.decode_jpeg (torchvision's own libjpeg-turbo) straight to a uint8
            tensor, then the v2 transforms: the fastest torchvision offers on a CPU.
Each makes one untimed pass (page cache, worker start) and then --passes timed passes; images/s
per worker is images / seconds / workers. Worker processes run one intra-op thread (the
DataLoader sets torch.set_num_threads(1) in its workers; the main process does the same),
with OMP_WAIT_POLICY=PASSIVE as for every peer here. Also measured, on the main process from
bytes in memory, for context: full decodes with PIL (Image.open + convert("RGB")) and with
torchvision.io.decode_jpeg.

  python torchvision_loader.py --images ROOT [--workers 1] [--batch 32] [--json]

JSON lines in the style of bench_loader's: first the versions (torch, torchvision, Pillow and
the libjpeg-turbo each decodes with), then {"bench":"loader","framework":"torchvision",
"case":PIPELINE,...,"images_per_s_per_thread":...} per pipeline and decode case.
"""

import argparse
import glob
import io
import json
import os
import re
import sys
import time

import peer_models  # imports no torch: that waits for the thread settings

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PIPELINES = ("pil", "pil_v2", "tensor")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", required=True, help="ROOT holding ROOT/train/<class>/*.jpg")
    p.add_argument("--pipelines", default=",".join(PIPELINES),
                   help=f"comma-separated, in this order: {', '.join(PIPELINES)}, decode_pil, decode_tv "
                        "(default: the three pipelines and both decodes)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--passes", type=int, default=1, help="timed passes per pipeline")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-decode", action="store_true", help="skip the decode-only cases")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = p.parse_args()
    peer_models.require_at_least(p, args, workers=1, batch=1, size=8, passes=1)
    args.pipelines = args.pipelines.split(",")
    unknown = set(args.pipelines) - set(PIPELINES) - {"decode_pil", "decode_tv"}
    if unknown:
        p.error(f"--pipelines: unknown {', '.join(sorted(unknown))}")
    if not args.no_decode:
        args.pipelines += [c for c in ("decode_pil", "decode_tv") if c not in args.pipelines]
    return args


def bundled_libjpeg(package_dir):
    """The libjpeg-turbo version a wheel bundles, from the version string in its library."""
    for lib in glob.glob(os.path.join(package_dir + ".libs", "libjpeg*.so*")):
        found = re.search(rb"libjpeg-turbo version ([\d.]+)", open(lib, "rb").read())
        if found:
            return found.group(1).decode()
    return "unknown"


def decode_tensor(path):
    """datasets.ImageFolder loader for the tensor pipeline: the file's bytes, decoded to RGB."""
    import torchvision.io as tio

    return tio.decode_jpeg(tio.read_file(path), mode=tio.ImageReadMode.RGB)


def dataset(name, root, size):
    import torch
    from torchvision import datasets, transforms
    from torchvision.transforms import v2

    if name == "pil":
        t = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                                transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        return datasets.ImageFolder(root, transform=t)
    tail = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    if name == "pil_v2":
        return datasets.ImageFolder(root, transform=v2.Compose([v2.ToImage(), *tail]))
    return datasets.ImageFolder(root, loader=decode_tensor, transform=v2.Compose(tail))


def loader_case(args, name, root):
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(dataset(name, root, args.size), batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, persistent_workers=True, generator=gen)

    def one_pass():
        images = 0
        for inputs, _ in loader:
            images += inputs.shape[0]
        return images

    one_pass()  # untimed: starts the workers, warms the page cache
    start = time.perf_counter()
    images = sum(one_pass() for _ in range(args.passes))
    return images, time.perf_counter() - start, args.workers


def decode_case(args, name, root):
    """Full-size decodes on this process from bytes in memory."""
    import torch
    import torchvision.io as tio
    from PIL import Image

    files = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(root, "*", "*.jpg")))]
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    start = time.perf_counter()
    for _ in range(args.passes):
        if name == "decode_pil":
            for f in files:
                Image.open(io.BytesIO(f)).convert("RGB").load()
        else:
            for t in tensors:
                tio.decode_jpeg(t, mode=tio.ImageReadMode.RGB)
    return len(files) * args.passes, time.perf_counter() - start, 1


def main():
    args = parse_args()
    peer_models.set_thread_environment(1)
    import PIL
    import torch
    import torchvision
    from PIL import features

    torch.set_num_threads(1)
    root = os.path.join(args.images, "train")
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": PIL.__version__,
                "pillow_libjpeg_turbo": features.version("libjpeg_turbo"),
                "torchvision_libjpeg_turbo": bundled_libjpeg(os.path.dirname(torchvision.__file__)),
                "python": sys.version.split()[0]}
    if args.json:
        print(json.dumps({"bench": "loader", "framework": "torchvision", **versions}), flush=True)
    else:
        print(f"torchvision_loader: RandomResizedCrop({args.size}) + flip + normalize, batch {args.batch}, "
              f"{args.workers} worker(s), {args.passes} timed pass(es) after one untimed; "
              + ", ".join(f"{k} {v}" for k, v in versions.items()))
        print(f"{'case':<12}{'images':>8}{'threads':>9}{'seconds':>10}{'images/s':>12}{'images/s/thread':>16}")
    for name in args.pipelines:
        run = decode_case if name.startswith("decode") else loader_case
        images, seconds, threads = run(args, name, root)
        rate = images / seconds
        if args.json:
            print(json.dumps({"bench": "loader", "framework": "torchvision", "case": name, "images": images,
                              "batch": args.batch if run is loader_case else 1, "workers": threads,
                              "size": args.size, "seconds": round(seconds, 4), "images_per_s": round(rate, 4),
                              "images_per_s_per_thread": round(rate / threads, 4)}), flush=True)
        else:
            print(f"{name:<12}{images:>8}{threads:>9}{seconds:>10.2f}{rate:>12.1f}{rate / threads:>16.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
