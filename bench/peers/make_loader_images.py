#!/usr/bin/env python3
"""ImageNet-sized test JPEGs from real photographs, for the loader benchmarks
(bench_loader and torchvision_loader.py, in run_loader_comparison.sh).

Writes ROOT/train/<class>/<n>.jpg: --count images spread over --classes class folders
(class-000, ...), each a random crop of one of the colour photographs in --photos (the
sample images Debian's python3-skimage ships), resized to 500x375 or 375x500 (landscape
or portrait, at random; about the median ImageNet training image) and saved at quality 90
with 4:2:0 chroma, as ImageNet's JPEGs are. A crop covers 40-100% of the photo's area at
the output's aspect ratio (or as much as fits) and is mirrored half the time, so that the
variants do not decode alike. Seeded: the same arguments give the same files.

  python make_loader_images.py ROOT [--photos DIR] [--count 1000] [--classes 10] [--seed 1]

The photos without installing scikit-image and its dependencies:
  cd /tmp && apt-get download python3-skimage && dpkg -x python3-skimage_*.deb /tmp/skimage-deb
  python make_loader_images.py ROOT --photos /tmp/skimage-deb/usr/lib/python3/dist-packages/skimage/data
Needs Pillow (in the peers' virtual environment, setup-venv.sh).
"""

import argparse
import os
import random
import sys

from PIL import Image

# The colour photographs among skimage's sample data (the rest are grayscale, synthetic or
# tiny): people, a cat, a coffee cup, motorcycles, a rocket launch, a telescope field, a
# retina and a stained tissue slice, so content and JPEG sizes vary as a real dataset's do.
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "motorcycle_right.png",
          "rocket.jpg", "hubble_deep_field.jpg", "retina.jpg", "ihc.png")
SIZES = ((500, 375), (375, 500))


def crop_box(rng, width, height, out_w, out_h):
    """A box covering 40-100% of the photo's area at out_w:out_h, clamped to the photo."""
    area = rng.uniform(0.4, 1.0) * width * height
    ratio = out_w / out_h
    w = min(width, round((area * ratio) ** 0.5))
    h = min(height, round(w / ratio))
    w = min(w, round(h * ratio))
    x = rng.randint(0, width - w)
    y = rng.randint(0, height - h)
    return x, y, x + w, y + h


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", help="output: ROOT/train/<class>/*.jpg")
    p.add_argument("--photos", default="/usr/lib/python3/dist-packages/skimage/data",
                   help="folder holding skimage's sample photos (default: python3-skimage's install path)")
    p.add_argument("--count", type=int, default=1000, help="images in all")
    p.add_argument("--classes", type=int, default=10, help="class folders")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quality", type=int, default=90)
    args = p.parse_args()
    if args.count < 1 or args.classes < 1:
        p.error("--count and --classes must be at least 1")

    photos = []
    for name in PHOTOS:
        path = os.path.join(args.photos, name)
        if not os.path.exists(path):
            sys.exit(f"make_loader_images: {path} not found (see --help for where the photos come from)")
        photos.append(Image.open(path).convert("RGB"))

    rng = random.Random(args.seed)
    total_bytes = 0
    for i in range(args.count):
        photo = photos[i % len(photos)]
        out_w, out_h = rng.choice(SIZES)
        image = photo.resize((out_w, out_h), Image.BICUBIC, box=crop_box(rng, *photo.size, out_w, out_h))
        if rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        folder = os.path.join(args.root, "train", f"class-{i % args.classes:03d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{i:06d}.jpg")
        image.save(path, "JPEG", quality=args.quality, subsampling="4:2:0")
        total_bytes += os.path.getsize(path)
    print(f"make_loader_images: {args.count} JPEGs in {args.classes} classes from {len(photos)} photos, "
          f"{total_bytes / args.count / 1e3:.0f} kB on average -> {os.path.join(args.root, 'train')}")


if __name__ == "__main__":
    main()
