"""Write ``inferenceservice-v1beta1.schema.json``: the OpenAPI v3 schema of KServe's
``InferenceService`` (``serving.kserve.io/v1beta1``) from the CRD that KServe ships
(``config/crd/full/serving.kserve.io_inferenceservices.yaml`` of github.com/kserve/kserve), trimmed
for ``tests/test_kserve_manifest.py``: along the paths of ``PATHS`` every node keeps its type,
``required``, ``enum``, ``pattern`` and the *names* of all its properties (the others' schemas
emptied), with ``additionalProperties: false`` where the CRD lists properties, as Kubernetes'
structural schemas prune unknown fields. A key KServe does not know (a typo) is then an error in
the test instead of a field the cluster silently drops.

    python tests/data/kserve/trim_crd.py CRD.yaml COMMIT > tests/data/kserve/inferenceservice-v1beta1.schema.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

#: The manifest's paths (tuples of property names) kept whole.
PATHS = [
    ("apiVersion",), ("kind",), ("metadata",),
    ("spec", "predictor", "minReplicas"), ("spec", "predictor", "maxReplicas"),
    ("spec", "predictor", "model", "modelFormat", "name"), ("spec", "predictor", "model", "modelFormat", "version"),
    ("spec", "predictor", "model", "protocolVersion"), ("spec", "predictor", "model", "runtime"),
    ("spec", "predictor", "model", "storageUri"),
    ("spec", "predictor", "model", "resources", "limits"), ("spec", "predictor", "model", "resources", "requests"),
]
KEPT = ("type", "required", "enum", "pattern", "format", "anyOf", "x-kubernetes-int-or-string")


def trim(node: dict[str, Any], tails: list[tuple[str, ...]]) -> dict[str, Any]:
    out = {key: node[key] for key in KEPT if key in node}
    if "additionalProperties" in node and not tails:
        out["additionalProperties"] = node["additionalProperties"]
    if "properties" in node:
        out["additionalProperties"] = False
        out["properties"] = {}
        for name, child in node["properties"].items():
            below = [tail[1:] for tail in tails if tail and tail[0] == name]
            out["properties"][name] = trim(child, [t for t in below if t]) if below else {}
            if any(not t for t in below):  # the path ends here: the whole subtree
                out["properties"][name] = child
    return out


def main(crd_path: str, commit: str) -> None:
    crd = yaml.safe_load(open(crd_path, encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    schema = trim(version["schema"]["openAPIV3Schema"], PATHS)
    schema["x-crd"] = {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": "v1beta1"}
    schema["$comment"] = (f"KServe's InferenceService v1beta1 schema, github.com/kserve/kserve commit {commit}, "
                          "config/crd/full/serving.kserve.io_inferenceservices.yaml, trimmed by tests/data/kserve/trim_crd.py")
    json.dump(schema, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
