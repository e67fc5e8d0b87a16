# PIL's bilinear resize of a pseudo-random 23x17 picture: tests/fixtures/pil_bilinear.json, which
# src/data/picture/tests.rs compares the resampling with (python3 scripts/pil_bilinear_fixture.py > tests/fixtures/pil_bilinear.json)
import json
from PIL import Image
W, H = 23, 17
s = 1
px = []
for i in range(W * H * 3):
    s = (s * 1103515245 + 12345) % (1 << 31)
    px.append((s >> 16) & 255)
img = Image.frombytes("RGB", (W, H), bytes(px))
cases = []
for size, box in [((7, 5), None), ((10, 8), None), ((40, 30), None), ((6, 5), (2.5, 1.25, 19.0, 15.5)), ((16, 16), (0.0, 0.0, 17.0, 17.0))]:
    r = img.resize(size, Image.BILINEAR, box=box)
    cases.append({"w": size[0], "h": size[1], "box": box or [0, 0, W, H], "rgb": list(r.tobytes())})
print(json.dumps({"w": W, "h": H, "cases": cases}, separators=(",", ":")))
